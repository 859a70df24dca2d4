package interop

import (
	"fmt"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/config/validation"
	"istio.io/istio/pkg/util/protomarshal"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// sidecarResourceCase is one Sidecar "sc" of namespace "app", whose spec
// is YAML, with what Istio's validator decides written down (entryCase).
type sidecarResourceCase = entryCase

func egressHosts(n int) string {
	hs := make([]string, n)
	for i := range hs {
		hs[i] = fmt.Sprintf("ns%d/*", i)
	}
	return "egress: [{hosts: [" + strings.Join(hs, ", ") + "]}]"
}

var sidecarResourceCases = map[string]sidecarResourceCase{
	"namespace and istio-system":                   {spec: `egress: [{hosts: ["./*", "istio-system/*"]}]`},
	"a selector and REGISTRY_ONLY":                 {spec: "workloadSelector: {labels: {app: a}}\negress: [{hosts: [\"./*\"]}]\noutboundTrafficPolicy: {mode: REGISTRY_ONLY}"},
	"a selector without labels":                    {spec: "workloadSelector: {}\negress: [{hosts: [\"./*\"]}]", warns: true},
	"a wildcard in a selector":                     {spec: "workloadSelector: {labels: {app: \"a*\"}}\negress: [{hosts: [\"./*\"]}]", istioRefuses: true},
	"an empty Sidecar":                             {spec: "workloadSelector: {labels: {app: a}}", istioRefuses: true},
	"only an outbound policy":                      {spec: "outboundTrafficPolicy: {mode: ALLOW_ANY}"},
	"a wildcard host":                              {spec: `egress: [{hosts: ["*/*.example.com"]}]`},
	"an exact host of a namespace":                 {spec: `egress: [{hosts: ["other/backend.other.svc.cluster.local"]}]`},
	"an exclusion":                                 {spec: `egress: [{hosts: ["*/*", "~/backend.other.svc.cluster.local"]}]`},
	"a namespace exclusion":                        {spec: `egress: [{hosts: ["*/*", "~other/*"]}]`},
	"a host without a namespace":                   {spec: `egress: [{hosts: ["backend.other.svc.cluster.local"]}]`, istioRefuses: true},
	"a short host":                                 {spec: `egress: [{hosts: ["other/backend"]}]`, istioRefuses: true},
	"an empty namespace":                           {spec: `egress: [{hosts: ["/backend.other.svc.cluster.local"]}]`, istioRefuses: true},
	"a bad namespace":                              {spec: `egress: [{hosts: ["Bad_NS/*"]}]`, istioRefuses: true},
	"a partial wildcard":                           {spec: `egress: [{hosts: ["*/a*.example.com"]}]`, istioRefuses: true},
	"a bad host label":                             {spec: `egress: [{hosts: ["*/bad_host.example.com"]}]`, istioRefuses: true},
	"no hosts":                                     {spec: `egress: [{port: {number: 80, name: http, protocol: HTTP}}]`, istioRefuses: true},
	"a host listed twice":                          {spec: `egress: [{hosts: ["./a.app.svc.cluster.local", "./a.app.svc.cluster.local"]}]`, warns: true},
	"a host beside its namespace's *":              {spec: `egress: [{hosts: ["app/*", "./a.app.svc.cluster.local"]}]`, warns: true},
	"*/* beside others":                            {spec: `egress: [{hosts: ["*/*", "other/*"]}]`, warns: true},
	"a port listener then a catch-all":             {spec: `egress: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["./*"]}, {hosts: ["istio-system/*"]}]`},
	"a catch-all before a port listener":           {spec: `egress: [{hosts: ["istio-system/*"]}, {port: {number: 80, name: http, protocol: HTTP}, hosts: ["./*"]}]`, istioRefuses: true},
	"two catch-alls":                               {spec: `egress: [{hosts: ["./*"]}, {hosts: ["istio-system/*"]}]`, istioRefuses: true},
	"two listeners of one port":                    {spec: `egress: [{port: {number: 80, name: a}, hosts: ["./*"]}, {port: {number: 80, name: b}, hosts: ["other/*"]}]`, istioRefuses: true},
	"an unknown protocol":                          {spec: `egress: [{port: {number: 80, name: a, protocol: SPDY}, hosts: ["./*"]}]`, istioRefuses: true},
	"a bad port name":                              {spec: `egress: [{port: {number: 80, name: A_B}, hosts: ["./*"]}]`, istioRefuses: true},
	"port out of range":                            {spec: `egress: [{port: {number: 70000, name: a}, hosts: ["./*"]}]`, istioRefuses: true},
	"a bind address":                               {spec: `egress: [{port: {number: 3306, name: db, protocol: MYSQL}, bind: 127.0.0.2, hosts: ["./*"]}]`},
	"a bind that is no address":                    {spec: `egress: [{port: {number: 3306, name: db}, bind: localhost, hosts: ["./*"]}]`, istioRefuses: true},
	"a unix socket":                                {spec: `egress: [{port: {number: 0, name: uds, protocol: HTTP}, bind: "unix:///var/run/app.sock", hosts: ["./*"]}]`},
	"port 0 without a socket":                      {spec: `egress: [{port: {number: 0, name: uds, protocol: HTTP}, hosts: ["./*"]}]`, istioRefuses: true},
	"a relative socket":                            {spec: `egress: [{port: {number: 0, name: uds}, bind: "unix://run/app.sock", hosts: ["./*"]}]`, istioRefuses: true},
	"a socket captured by iptables":                {spec: `egress: [{port: {number: 0, name: uds}, bind: "unix:///run/a.sock", captureMode: IPTABLES, hosts: ["./*"]}]`, istioRefuses: true},
	"a target port":                                {spec: `egress: [{port: {number: 80, name: a, targetPort: 8080}, hosts: ["./*"]}]`, istioRefuses: true},
	"an egress proxy under ALLOW_ANY":              {spec: "outboundTrafficPolicy: {mode: ALLOW_ANY, egressProxy: {host: proxy.example.com, port: {number: 3128}}}"},
	"an egress proxy under REGISTRY_ONLY":          {spec: "outboundTrafficPolicy: {mode: REGISTRY_ONLY, egressProxy: {host: proxy.example.com, port: {number: 3128}}}", istioRefuses: true},
	"an egress proxy without a port":               {spec: "outboundTrafficPolicy: {mode: ALLOW_ANY, egressProxy: {host: proxy.example.com}}", istioRefuses: true},
	"an ingress listener":                          {spec: `ingress: [{port: {number: 9080, name: http, protocol: HTTP}, defaultEndpoint: "127.0.0.1:8080"}]`},
	"an ingress listener without a port":           {spec: `ingress: [{defaultEndpoint: "127.0.0.1:8080"}]`, istioRefuses: true},
	"an ingress default endpoint elsewhere":        {spec: `ingress: [{port: {number: 9080, name: http, protocol: HTTP}, defaultEndpoint: "10.0.0.1:8080"}]`, istioRefuses: true},
	"an ingress default endpoint on a socket":      {spec: `ingress: [{port: {number: 9080, name: http, protocol: HTTP}, defaultEndpoint: "unix:///var/run/app.sock"}]`},
	"two ingress listeners of one port":            {spec: `ingress: [{port: {number: 9080, name: a, protocol: HTTP}}, {port: {number: 9080, name: b, protocol: HTTP}}]`, istioRefuses: true},
	"ingress TLS on an HTTP port":                  {spec: `ingress: [{port: {number: 9080, name: a, protocol: HTTP}, tls: {mode: SIMPLE, serverCertificate: /c.pem, privateKey: /k.pem}}]`, istioRefuses: true},
	"ingress ISTIO_MUTUAL":                         {spec: `ingress: [{port: {number: 9443, name: a, protocol: HTTPS}, tls: {mode: ISTIO_MUTUAL}}]`, istioRefuses: true},
	"ingress TLS with a credentialName":            {spec: `ingress: [{port: {number: 9443, name: a, protocol: HTTPS}, tls: {mode: SIMPLE, credentialName: c}}]`, istioRefuses: true},
	"an inbound pool without settings":             {spec: "inboundConnectionPool: {}", istioRefuses: true},
	"an inbound pool with TCP limits":              {spec: "inboundConnectionPool: {tcp: {maxConnections: 100, connectTimeout: 2s}}"},
	"an inbound pool of a negative limit":          {spec: "inboundConnectionPool: {http: {http2MaxRequests: -1}}", istioRefuses: true},
	"ingress TLS SIMPLE with files on HTTPS":       {spec: `ingress: [{port: {number: 8443, name: a, protocol: HTTPS}, defaultEndpoint: "127.0.0.1:8080", tls: {mode: SIMPLE, serverCertificate: /c.pem, privateKey: /k.pem}}]`},
	"ingress TLS MUTUAL with a CA on a TLS port":   {spec: `ingress: [{port: {number: 9443, name: a, protocol: TLS}, tls: {mode: MUTUAL, serverCertificate: /c.pem, privateKey: /k.pem, caCertificates: /ca.pem}}]`},
	"ingress TLS SIMPLE without a certificate":     {spec: `ingress: [{port: {number: 8443, name: a, protocol: HTTPS}, tls: {mode: SIMPLE}}]`, istioRefuses: true},
	"an ingress bind that is no address":           {spec: `ingress: [{port: {number: 9080, name: a, protocol: HTTP}, bind: my-host}]`, istioRefuses: true},
	"an ingress listener bound (captureMode NONE)": {spec: `ingress: [{port: {number: 9080, name: a, protocol: HTTP}, captureMode: NONE, defaultEndpoint: "127.0.0.1:8080"}]`},
	"an ingress pool with HTTP limits":             {spec: `ingress: [{port: {number: 9080, name: a, protocol: HTTP}, connectionPool: {http: {http2MaxRequests: 10, idleTimeout: 30s}}}]`},
	"an HTTP pool on a TCP ingress port":           {spec: `ingress: [{port: {number: 9000, name: t, protocol: TCP}, connectionPool: {http: {maxRetries: 3}}}]`, warns: true},
	"1,024 egress hosts":                           {spec: egressHosts(policy.MaxSidecarHosts)},
	"1,025 egress hosts, which Istio takes":        {spec: egressHosts(policy.MaxSidecarHosts + 1), stricter: "every proxy a Sidecar selects matches every service against its hosts: 1,024 at most"},
	"the mesh's ALLOW_ANY_DYNAMIC_DNS by number":   {spec: "outboundTrafficPolicy: {mode: 3}", istioRefuses: true},
	"a mode of no name":                            {spec: "outboundTrafficPolicy: {mode: 2}", stricter: "a mode Istio does not name would be read as ALLOW_ANY"},
}

// TestSidecarValidationAgreesWithIstio: every case is admitted or refused
// by policy.ValidateSidecar as Istio's own validation.ValidateSidecar
// decides, with a warning where Istio warns, but for the deliberate
// differences, each refused by Bulwark only.
func TestSidecarValidationAgreesWithIstio(t *testing.T) {
	if len(sidecarResourceCases) < 40 {
		t.Fatalf("%d cases", len(sidecarResourceCases))
	}
	refused, stricter := 0, 0
	for name, c := range sidecarResourceCases {
		t.Run(name, func(t *testing.T) {
			spec := &networking.Sidecar{}
			if e := protomarshal.ApplyYAMLStrict(c.spec, spec); e != nil {
				t.Fatalf("spec: %v", e)
			}
			meta := config.Meta{Name: "sc", Namespace: "app", GroupVersionKind: gvk.Sidecar}
			warn, err := validation.ValidateSidecar(config.Config{Meta: meta, Spec: spec})
			f := policy.ValidateSidecar(meta.Namespace, spec)
			r, d := agreeWithIstio(t, f, err, warn, c.istioRefuses, c.warns, c.stricter)
			if r {
				refused++
			}
			if d {
				stricter++
			}
		})
	}
	t.Logf("%d Sidecars, %d refused, %d deliberate differences", len(sidecarResourceCases), refused, stricter)
}
