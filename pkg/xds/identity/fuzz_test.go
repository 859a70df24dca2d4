package identity

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

var testTD = spiffeid.RequireTrustDomainFromString("cluster.local")

// FuzzNodeMetadata feeds arbitrary JSON as node metadata: parsing must
// return an error or metadata naming a valid identity, never panic.
func FuzzNodeMetadata(f *testing.F) {
	for _, s := range []string{
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","GENERATOR":"grpc","LABELS":{"app":"x"}}`,
		`{"INSTANCE_IPS":1}`,
		`{"NAMESPACE":["app"],"SERVICE_ACCOUNT":"a"}`,
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"a","LABELS":{"x":1}}`,
		`{"NAMESPACE":"../..","SERVICE_ACCOUNT":"a"}`,
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"a/b"}`,
		`{"NAMESPACE":null,"SERVICE_ACCOUNT":null}`,
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"a","REQUESTED_NETWORK_VIEW":"net-b,,net-a,net-b"}`,
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"a","REQUESTED_NETWORK_VIEW":",,,"}`,
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"a","REQUESTED_NETWORK_VIEW":["net-a"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var md structpb.Struct
		if err := protojson.Unmarshal(data, &md); err != nil {
			return
		}
		m, err := ParseMetadata(&md)
		if err != nil {
			return
		}
		if _, err := m.Identity(testTD); err != nil {
			t.Fatalf("accepted metadata without a valid identity: %v", err)
		}
		if len(m.NetworkView) > maxNetworkView || !slices.IsSorted(m.NetworkView) || slices.Contains(m.NetworkView, "") ||
			len(slices.Compact(slices.Clone(m.NetworkView))) != len(m.NetworkView) {
			t.Fatalf("network view %q", m.NetworkView)
		}
		for _, n := range m.NetworkView {
			if len(n) > maxNetworkName || strings.Contains(n, ",") {
				t.Fatalf("network view %q", m.NetworkView)
			}
		}
	})
}

func TestParseMetadata(t *testing.T) {
	tests := map[string]struct {
		json string
		ok   bool
	}{
		"pilot-agent's proxyless metadata parses": {ok: true, json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","GENERATOR":"grpc","INSTANCE_IPS":"10.0.0.1,fd00::1","LABELS":{"app":"client"},"ISTIO_VERSION":"1.24.0","PROXY_CONFIG":{"concurrency":2}}`},
		"a numeric INSTANCE_IPS is an error":      {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","INSTANCE_IPS":1}`},
		"a numeric label is an error":             {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","LABELS":{"x":1}}`},
		"LABELS as a list is an error":            {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","LABELS":["x"]}`},
		"a lower-case namespace key is not read":  {json: `{"namespace":"app","SERVICE_ACCOUNT":"client"}`},
		"a missing service account is an error":   {json: `{"NAMESPACE":"app"}`},
		"a slash in the namespace is an error":    {json: `{"NAMESPACE":"app/sa/x","SERVICE_ACCOUNT":"client"}`},
		"a router's UNPRIVILEGED_POD parses":      {ok: true, json: `{"NAMESPACE":"gw","SERVICE_ACCOUNT":"ingress","UNPRIVILEGED_POD":"true"}`},
		"a boolean UNPRIVILEGED_POD is an error":  {json: `{"NAMESPACE":"gw","SERVICE_ACCOUNT":"ingress","UNPRIVILEGED_POD":true}`},
		"a NETWORK parses":                        {ok: true, json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","NETWORK":"net-a"}`},
		"a numeric NETWORK is an error":           {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","NETWORK":1}`},
		"a NETWORK over 253 bytes is an error":    {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","NETWORK":"` + strings.Repeat("n", 254) + `"}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var md structpb.Struct
			if err := protojson.Unmarshal([]byte(tc.json), &md); err != nil {
				t.Fatal(err)
			}
			_, err := ParseMetadata(&md)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %t", err, tc.ok)
			}
		})
	}
}

func TestParseRequestedNetworkView(t *testing.T) {
	many := strings.Repeat("n,", maxNetworkView-1) + "n"
	tests := map[string]struct {
		value any // absent when nil
		want  []string
		err   bool
	}{
		"absent: every network":                        {},
		"empty: every network, as Istio's":             {value: "", want: nil},
		"one network":                                  {value: "net-a", want: []string{"net-a"}},
		"sorted, without duplicates or the empty name": {value: "net-b,,net-a,net-b", want: []string{"net-a", "net-b"}},
		"commas alone: only endpoints of no network":   {value: ",", want: []string{}},
		"names are kept as written, as Istio's":        {value: " net-a", want: []string{" net-a"}},
		"64 names parse":                               {value: many, want: []string{"n"}},
		"65 names are an error":                        {value: many + ",m", err: true},
		"a name over 253 bytes is an error":            {value: "net-a," + strings.Repeat("n", 254), err: true},
		"a list is an error, as Istio's JSON decoding": {value: []any{"net-a"}, err: true},
		"a number is an error":                         {value: 1.0, err: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fields := map[string]any{"NAMESPACE": "app", "SERVICE_ACCOUNT": "client"}
			if tc.value != nil {
				fields["REQUESTED_NETWORK_VIEW"] = tc.value
			}
			md, err := structpb.NewStruct(fields)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseMetadata(md)
			if tc.err {
				if !errors.Is(err, ErrBadNode) || !strings.Contains(err.Error(), "REQUESTED_NETWORK_VIEW") {
					t.Fatalf("err = %v, want a bad node naming REQUESTED_NETWORK_VIEW", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.NetworkView, tc.want) || (m.NetworkView == nil) != (tc.want == nil) {
				t.Errorf("view %#v, want %#v", m.NetworkView, tc.want)
			}
		})
	}
}

// FuzzNodeWorkload feeds arbitrary node IDs and addresses with valid
// metadata: reading them must refuse or give a workload of the metadata's
// namespace whose addresses are valid and bounded, never panic.
func FuzzNodeWorkload(f *testing.F) {
	for _, s := range [][2]string{
		{"sidecar~10.0.0.1~echo-1.app~app.svc.cluster.local", ""},
		{"sidecar~10.0.0.1~echo-1.other~other.svc.cluster.local", ""},
		{"router~10.0.0.1~gw.app~app.svc.cluster.local", ""},
		{"sidecar~~echo-1.app~app.svc.cluster.local", "10.0.0.1,fd00::1"},
		{"sidecar~10.0.0.1~~app.svc.cluster.local", ""},
		{"sidecar~10.0.0.1~a.app~x~y", ""},
		{"sidecar~fe80::1%eth0~a.app~app.svc.cluster.local", ""},
		{"sidecar~10.0.0.1~a.app~app.svc.cluster.local", strings.Repeat("10.0.0.1,", 20)},
	} {
		f.Add(s[0], s[1], "")
		f.Add(s[0], s[1], "grpc")
	}
	f.Fuzz(func(t *testing.T, id, ips, generator string) {
		meta := &NodeMeta{Namespace: "app", ServiceAccount: "client", InstanceIPs: ips, Generator: generator}
		w, err := WorkloadOf(&core.Node{Id: id}, meta)
		if err != nil {
			if w != nil {
				t.Fatal("a refused node has a workload")
			}
			return
		}
		if w.Namespace != "app" || len(w.IPs) > maxInstanceIPs {
			t.Fatalf("workload %+v", w)
		}
		for _, ip := range w.IPs {
			if a, err := netip.ParseAddr(ip); err != nil || a.Zone() != "" {
				t.Fatalf("accepted address %q", ip)
			}
		}
		if w.Envoy && !strings.HasPrefix(id, "sidecar~") && !strings.HasPrefix(id, "router~") {
			t.Fatalf("an Envoy node of another type was accepted: %q", id)
		}
		if w.Router != (w.Envoy && strings.HasPrefix(id, "router~")) {
			t.Fatalf("node %q: router %v", id, w.Router)
		}
	})
}
