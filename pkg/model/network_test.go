package model

import (
	"slices"
	"testing"
)

func TestEndpointsInNetwork(t *testing.T) {
	eps := []Endpoint{{Address: "a", Network: "n1"}, {Address: "b", Network: "n2"}, {Address: "c"}}
	addrs := func(eps []Endpoint) (out []string) {
		for _, ep := range eps {
			out = append(out, ep.Address)
		}
		return out
	}
	if got := addrs(EndpointsInNetwork(eps, "n1")); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("n1: %v", got)
	}
	if got := EndpointsInNetwork(eps, ""); &got[0] != &eps[0] {
		t.Error("a proxy of no network: eps copied")
	}
	same := eps[:1]
	if got := EndpointsInNetwork(same, "n1"); &got[0] != &same[0] {
		t.Error("nothing left out: eps copied")
	}
}
