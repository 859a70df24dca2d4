package interop

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/config/validation"
	"istio.io/istio/pkg/util/protomarshal"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// entryCase is one ServiceEntry "se" of namespace "app", whose spec is
// YAML.
type entryCase struct {
	labels map[string]string
	spec   string
	// istioRefuses is what Istio's validator decides, written down so
	// that a change of Istio's rules shows.
	istioRefuses bool
	// stricter says why Bulwark refuses what Istio admits: a deliberate
	// difference.
	stricter string
	// warns is whether Istio warns about the object; Bulwark must too.
	warns bool
}

const (
	httpPort = `ports: [{number: 80, name: http, protocol: HTTP}]`
	tlsPort  = `ports: [{number: 443, name: tls, protocol: TLS}]`
	tcpPort  = `ports: [{number: 5432, name: tcp, protocol: TCP}]`
)

var entryCases = map[string]entryCase{
	"DNS with an HTTP port":                         {spec: "hosts: [api.example.com]\nresolution: DNS\n" + httpPort},
	"DNS with a TLS port and two hosts":             {spec: "hosts: [a.example.com, b.example.com]\nresolution: DNS\n" + tlsPort},
	"DNS_ROUND_ROBIN with one endpoint":             {spec: "hosts: [api.example.com]\nresolution: DNS_ROUND_ROBIN\n" + httpPort + "\nendpoints: [{address: x.example.net}]"},
	"DNS_ROUND_ROBIN with two endpoints":            {spec: "hosts: [api.example.com]\nresolution: DNS_ROUND_ROBIN\n" + httpPort + "\nendpoints: [{address: x.example.net}, {address: y.example.net}]", istioRefuses: true},
	"DNS with a wildcard host and no endpoints":     {spec: "hosts: [\"*.example.com\"]\nresolution: DNS\n" + httpPort, istioRefuses: true},
	"DNS with a wildcard host and endpoints":        {spec: "hosts: [\"*.example.com\"]\nresolution: DNS\n" + httpPort + "\nendpoints: [{address: x.example.net}]"},
	"DNS with an endpoint of a bad name":            {spec: "hosts: [api.example.com]\nresolution: DNS\n" + httpPort + "\nendpoints: [{address: \"bad_name\"}]", istioRefuses: true},
	"DNS with a CIDR address":                       {spec: "hosts: [api.example.com]\naddresses: [10.0.0.0/16]\nresolution: DNS\n" + httpPort, istioRefuses: true},
	"DNS with an address, TCP and two hosts":        {spec: "hosts: [a.example.com, b.example.com]\naddresses: [240.0.0.1]\nresolution: DNS\n" + tcpPort, istioRefuses: true, warns: true},
	"DNS with an address, TLS and two hosts":        {spec: "hosts: [a.example.com, b.example.com]\naddresses: [240.0.0.1]\nresolution: DNS\n" + tlsPort, warns: true},
	"STATIC with IP endpoints":                      {spec: "hosts: [db.internal]\naddresses: [240.0.0.1]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{address: 10.0.0.1, labels: {app: db}}]"},
	"STATIC with a named endpoint":                  {spec: "hosts: [db.internal]\naddresses: [240.0.0.1]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{address: db.example.net}]", istioRefuses: true},
	"STATIC with an endpoint port of no entry port": {spec: "hosts: [db.internal]\naddresses: [240.0.0.1]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{address: 10.0.0.1, ports: {other: 15432}}]", istioRefuses: true},
	"STATIC with a bad endpoint label":              {spec: "hosts: [db.internal]\naddresses: [240.0.0.1]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{address: 10.0.0.1, labels: {\"bad key!\": x}}]", istioRefuses: true},
	"STATIC with a CIDR address":                    {spec: "hosts: [db.internal]\naddresses: [10.1.0.0/16]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{address: 10.1.0.1}]"},
	"STATIC with a unix endpoint": {spec: "hosts: [db.internal]\naddresses: [240.0.0.1]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{address: \"unix:///var/run/db.sock\"}]",
		stricter: "unix domain socket endpoints are not served"},
	"NONE with a wildcard host":               {spec: "hosts: [\"*.example.com\"]\nresolution: NONE\n" + tlsPort},
	"NONE with endpoints":                     {spec: "hosts: [a.example.com]\nresolution: NONE\n" + tlsPort + "\nendpoints: [{address: 10.0.0.1}]", istioRefuses: true},
	"NONE with a TCP port and no address":     {spec: "hosts: [a.example.com]\nresolution: NONE\n" + tcpPort, warns: true},
	"NONE with a workloadSelector":            {spec: "hosts: [a.example.com]\nresolution: NONE\n" + tlsPort + "\nworkloadSelector: {labels: {app: a}}", warns: true},
	"NONE with two TCP hosts":                 {spec: "hosts: [a.example.com, b.example.com]\naddresses: [240.0.0.1]\nresolution: NONE\n" + tcpPort},
	"DNS with a TCP port and no address":      {spec: "hosts: [a.example.com]\nresolution: DNS\n" + tcpPort},
	"the TCP warning opted out of allocation": {labels: map[string]string{"networking.istio.io/enable-autoallocate-ip": "false"}, spec: "hosts: [a.example.com]\nresolution: DNS\n" + tcpPort, warns: true},
	"the host *":                                {spec: "hosts: [\"*\"]\nresolution: NONE\n" + httpPort, istioRefuses: true},
	"no hosts":                                  {spec: "resolution: NONE\n" + httpPort, istioRefuses: true},
	"a partial wildcard host":                   {spec: "hosts: [\"a*.example.com\"]\nresolution: NONE\n" + httpPort, istioRefuses: true, warns: true},
	"a bad host":                                {spec: "hosts: [\"bad_host.example.com\"]\nresolution: NONE\n" + httpPort, istioRefuses: true},
	"a bad address":                             {spec: "hosts: [a.example.com]\naddresses: [300.0.0.1]\nresolution: NONE\n" + httpPort, istioRefuses: true},
	"two ports of one number":                   {spec: "hosts: [a.example.com]\nresolution: DNS\nports: [{number: 80, name: http, protocol: HTTP}, {number: 80, name: http2, protocol: HTTP2}]", istioRefuses: true},
	"two ports of one name":                     {spec: "hosts: [a.example.com]\nresolution: DNS\nports: [{number: 80, name: http, protocol: HTTP}, {number: 81, name: http, protocol: HTTP}]", istioRefuses: true},
	"a port without a name":                     {spec: "hosts: [a.example.com]\nresolution: DNS\nports: [{number: 80, protocol: HTTP}]", istioRefuses: true},
	"an unknown protocol":                       {spec: "hosts: [a.example.com]\nresolution: DNS\nports: [{number: 80, name: p, protocol: SPDY}]", istioRefuses: true},
	"a bad target port":                         {spec: "hosts: [a.example.com]\nresolution: DNS\nports: [{number: 80, name: http, protocol: HTTP, targetPort: 70000}]", istioRefuses: true},
	"port 0":                                    {spec: "hosts: [a.example.com]\nresolution: DNS\nports: [{number: 0, name: http, protocol: HTTP}]", istioRefuses: true},
	"endpoints and a workloadSelector":          {spec: "hosts: [a.example.com]\nresolution: STATIC\n" + httpPort + "\nendpoints: [{address: 10.0.0.1}]\nworkloadSelector: {labels: {app: a}}", istioRefuses: true},
	"a workloadSelector without labels":         {spec: "hosts: [a.example.com]\nresolution: STATIC\n" + httpPort + "\nworkloadSelector: {}", warns: true},
	"a wildcard in a workloadSelector":          {spec: "hosts: [a.example.com]\nresolution: STATIC\n" + httpPort + "\nworkloadSelector: {labels: {app: \"a*\"}}", istioRefuses: true},
	"MESH_INTERNAL with a selector":             {spec: "hosts: [vm.internal]\nlocation: MESH_INTERNAL\nresolution: STATIC\n" + httpPort + "\nworkloadSelector: {labels: {app: vm}}"},
	"exportTo . and *":                          {spec: "hosts: [a.example.com]\nresolution: DNS\n" + httpPort + "\nexportTo: [\".\", \"*\"]", istioRefuses: true},
	"exportTo ~ alone":                          {spec: "hosts: [a.example.com]\nresolution: DNS\n" + httpPort + "\nexportTo: [\"~\"]"},
	"exportTo ~ and a namespace":                {spec: "hosts: [a.example.com]\nresolution: DNS\n" + httpPort + "\nexportTo: [\"~\", other]", istioRefuses: true},
	"exportTo . and its own namespace":          {spec: "hosts: [a.example.com]\nresolution: DNS\n" + httpPort + "\nexportTo: [\".\", app]", istioRefuses: true},
	"exportTo namespaces":                       {spec: "hosts: [a.example.com]\nresolution: DNS\n" + httpPort + "\nexportTo: [\".\", other]"},
	"DYNAMIC_DNS with a wildcard host":          {spec: "hosts: [\"*.example.com\"]\nresolution: DYNAMIC_DNS\n" + httpPort},
	"DYNAMIC_DNS with a plain host":             {spec: "hosts: [a.example.com]\nresolution: DYNAMIC_DNS\n" + httpPort, istioRefuses: true},
	"DYNAMIC_DNS with a TCP port":               {spec: "hosts: [\"*.example.com\"]\nresolution: DYNAMIC_DNS\n" + tcpPort, istioRefuses: true},
	"several hosts and a port with no protocol": {spec: "hosts: [a.example.com, b.example.com]\naddresses: [240.0.0.1]\nresolution: DNS\nports: [{number: 9000, name: any}]", istioRefuses: true},
	"an endpoint without address nor network":   {spec: "hosts: [a.example.com]\naddresses: [240.0.0.1]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{labels: {app: a}}]", istioRefuses: true},
	"an endpoint without address but a network": {spec: "hosts: [a.example.com]\naddresses: [240.0.0.1]\nresolution: STATIC\n" + tcpPort + "\nendpoints: [{network: net2}]", warns: true},
}

// TestServiceEntryValidationAgreesWithIstio: every case is admitted or
// refused by policy.ValidateServiceEntry as Istio's own
// validation.ValidateServiceEntry decides, with a warning where Istio
// warns, but for the deliberate differences, each refused by Bulwark
// only.
func TestServiceEntryValidationAgreesWithIstio(t *testing.T) {
	if len(entryCases) < 25 {
		t.Fatalf("%d cases", len(entryCases))
	}
	refused, stricter := 0, 0
	for name, c := range entryCases {
		t.Run(name, func(t *testing.T) {
			spec := &networking.ServiceEntry{}
			if e := protomarshal.ApplyYAMLStrict(c.spec, spec); e != nil {
				t.Fatalf("spec: %v", e)
			}
			meta := config.Meta{Name: "se", Namespace: "app", Labels: c.labels, GroupVersionKind: gvk.ServiceEntry}
			warn, err := validation.ValidateServiceEntry(config.Config{Meta: meta, Spec: spec})
			f := policy.ValidateServiceEntry(meta.Namespace, c.labels, spec)
			r, d := agreeWithIstio(t, f, err, warn, c.istioRefuses, c.warns, c.stricter)
			if r {
				refused++
			}
			if d {
				stricter++
			}
		})
	}
	t.Logf("%d entries, %d refused, %d deliberate differences", len(entryCases), refused, stricter)
}
