package policy

import (
	"fmt"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// The agreement of ValidateServiceEntry with Istio's validator is tested
// in test/interop (TestServiceEntryValidationAgreesWithIstio); these
// cases cover the bounds Istio does not set.
func TestServiceEntryLimits(t *testing.T) {
	port := []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}
	many := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	for name, tc := range map[string]struct {
		spec *networking.ServiceEntry
		want string
	}{
		"1024 hosts are allowed": {spec: &networking.ServiceEntry{
			Hosts: many(MaxHosts, func(i int) string { return fmt.Sprintf("h%d.example.com", i) }), Ports: port,
			Resolution: networking.ServiceEntry_DNS,
		}},
		"1025 hosts are refused": {spec: &networking.ServiceEntry{
			Hosts: many(MaxHosts+1, func(i int) string { return fmt.Sprintf("h%d.example.com", i) }), Ports: port,
		}, want: "spec.hosts: 1025 hosts, more than 1024"},
		"257 addresses are refused": {spec: &networking.ServiceEntry{
			Hosts: []string{"a.example.com"}, Ports: port,
			Addresses: many(MaxEntryAddresses+1, func(i int) string { return fmt.Sprintf("240.0.%d.%d", i/256, i%256) }),
		}, want: "spec: more than 256 addresses"},
		"4097 endpoints are refused": {spec: &networking.ServiceEntry{
			Hosts: []string{"a.example.com"}, Ports: port, Resolution: networking.ServiceEntry_STATIC,
			Endpoints: func() []*networking.WorkloadEntry {
				out := make([]*networking.WorkloadEntry, MaxEntryEndpoints+1)
				for i := range out {
					out[i] = &networking.WorkloadEntry{Address: fmt.Sprintf("10.%d.%d.1", i/256, i%256)}
				}
				return out
			}(),
		}, want: "4096 endpoints"},
		"a unix endpoint is refused": {spec: &networking.ServiceEntry{
			Hosts: []string{"a.example.com"}, Ports: port, Addresses: []string{"240.0.0.1"}, Resolution: networking.ServiceEntry_STATIC,
			Endpoints: []*networking.WorkloadEntry{{Address: "unix:///run/a.sock"}},
		}, want: "spec.endpoints[0].address: unix domain socket endpoints are not supported"},
	} {
		t.Run(name, func(t *testing.T) {
			f := ValidateServiceEntry("app", nil, tc.spec)
			got := strings.Join(f.Errors, "\n")
			if (tc.want == "") != f.OK() || !strings.Contains(got, tc.want) {
				t.Errorf("errors %q, want %q", got, tc.want)
			}
		})
	}
}
