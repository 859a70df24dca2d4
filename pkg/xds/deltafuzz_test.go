package xds

import (
	"maps"
	"slices"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// FuzzDeltaSubscription replays a sequence of incremental requests on a
// stream's subscription and on go-control-plane's, whose semantics it
// keeps: the names subscribed, the wildcard and the versions recorded must
// be equal after every request.
//
// The input is requests separated by ";", each "sub|unsub" with names
// separated by ","; a first part of "name=version" pairs is the versions
// announced.
func FuzzDeltaSubscription(f *testing.F) {
	for _, seed := range []string{
		";|;a|;*|a;|*",
		"a=1,b=2;a,b|;|b",
		";*,a|;|a;a|",
		";a|a;b,c|;|b,c;*|",
		";|;|;x|;|*;|x",
		"a=;a,*|b;|a,*",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		parts := strings.Split(in, ";")
		if len(parts) < 2 || len(parts) > 64 {
			return
		}
		initial := map[string]string{}
		for _, kv := range split(parts[0]) {
			k, v, _ := strings.Cut(kv, "=")
			initial[k] = v
		}
		var sets nameSets
		var ours *deltaState
		var theirs stream.Subscription
		for i, r := range parts[1:] {
			sub, unsub, _ := strings.Cut(r, "|")
			s, u := split(sub), split(unsub)
			if i == 0 {
				ours = newDeltaState(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: s, InitialResourceVersions: maps.Clone(initial)})
				theirs = stream.NewDeltaSubscription(s, u, maps.Clone(initial), true)
			} else {
				theirs.UpdateResourceSubscriptions(s, u)
			}
			if err := ours.update(&sets, s, u); err != nil {
				return // more names than allowed
			}
			want := slices.Sorted(maps.Keys(theirs.SubscribedResources()))
			var got []string
			if ours.names != nil {
				got = ours.names.names
			}
			if !slices.Equal(got, want) || ours.wildcard != theirs.IsWildcard() {
				t.Fatalf("after request %d: names %q wildcard %t, want %q %t", i, got, ours.wildcard, want, theirs.IsWildcard())
			}
			if len(ours.recorded)+len(theirs.ReturnedResources()) > 0 && !maps.Equal(ours.recorded, theirs.ReturnedResources()) {
				t.Fatalf("after request %d: recorded %v, want %v", i, ours.recorded, theirs.ReturnedResources())
			}
		}
	})
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
