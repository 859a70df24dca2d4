package envoygen

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const echoCluster = "outbound|80||echo.app.svc.cluster.local"

// originationRule is a DestinationRule for echo in namespace ns.
func originationRule(ns, trafficPolicy string) string {
	return manifests + `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-tls, namespace: ` + ns + `}
spec:
  host: echo.app.svc.cluster.local
` + trafficPolicy
}

var sleepInApp = &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}}

// upstreamTLS is the TLS context of cl's transport socket; it fails the
// test when cl has socket matches (auto-mTLS) or no TLS socket.
func upstreamTLS(t *testing.T, cl *cluster.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	if cl == nil {
		t.Fatal("cluster missing")
	}
	if len(cl.TransportSocketMatches) != 0 || cl.TransportSocket.GetName() != tlsSocketName {
		t.Fatalf("want one TLS transport socket and no matches, got %v", cl)
	}
	up := &tlsv3.UpstreamTlsContext{}
	if err := cl.TransportSocket.GetTypedConfig().UnmarshalTo(up); err != nil {
		t.Fatal(err)
	}
	return up
}

// upstreamHTTP are cl's upstream HTTP options (auto SNI), nil without.
func upstreamHTTP(t *testing.T, cl *cluster.Cluster) *core.UpstreamHttpProtocolOptions {
	t.Helper()
	a := cl.TypedExtensionProtocolOptions[httpOptionsName]
	if a == nil {
		return nil
	}
	opts := &httpopts.HttpProtocolOptions{}
	if err := a.UnmarshalTo(opts); err != nil {
		t.Fatal(err)
	}
	return opts.UpstreamHttpProtocolOptions
}

func sanNames(v *tlsv3.CertificateValidationContext) (out []string) {
	for _, m := range v.GetMatchSubjectAltNames() {
		out = append(out, m.GetExact())
	}
	return out
}

// refused checks that name is a static cluster without endpoints and has
// no EDS assignment: nothing reaches the service.
func refused(t *testing.T, c config, name string) {
	t.Helper()
	cl := c.clusters[name]
	if cl == nil || cl.GetType() != cluster.Cluster_STATIC || len(cl.GetLoadAssignment().GetEndpoints()) != 0 || cl.TransportSocket != nil {
		t.Errorf("%s: want a static cluster without endpoints, got %v", name, cl)
	}
	if c.endpoints[name] != nil {
		t.Errorf("%s: refused cluster has endpoints %v", name, c.endpoints[name])
	}
}

func TestSimpleWithFilesSANAndSNI(t *testing.T) {
	snap := modeltest.Load(t, originationRule("app", `  trafficPolicy:
    tls: {mode: SIMPLE, caCertificates: /etc/certs/ca.pem, caCrl: /etc/certs/crl.pem, sni: echo.example.com, subjectAltNames: [echo.example.com, spiffe://x/y]}
`))
	c := generate(t, &Generator{TrustDomain: td}, snap, sleepInApp)
	cl := c.clusters[echoCluster]
	up := upstreamTLS(t, cl)
	ctx := up.GetCommonTlsContext()
	if up.Sni != "echo.example.com" || len(ctx.TlsCertificateSdsSecretConfigs) != 0 || len(ctx.AlpnProtocols) != 0 {
		t.Errorf("SIMPLE context: %v", up)
	}
	v := ctx.GetCombinedValidationContext()
	if got := sanNames(v.GetDefaultValidationContext()); !slices.Equal(got, []string{"echo.example.com", "spiffe://x/y"}) {
		t.Errorf("SANs %v", got)
	}
	if v.GetDefaultValidationContext().GetCrl().GetFilename() != "/etc/certs/crl.pem" {
		t.Errorf("CRL %v", v.GetDefaultValidationContext().GetCrl())
	}
	sds := v.GetValidationContextSdsSecretConfig()
	if sds.GetName() != "file-root:/etc/certs/ca.pem" || sds.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "sds-grpc" {
		t.Errorf("CA secret %v", sds)
	}
	if p := ctx.GetTlsParams(); p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 || len(p.GetCipherSuites()) != 0 || len(p.GetEcdhCurves()) != 0 {
		t.Errorf("TLS params %v, want TLS 1.2 at least and Envoy's default curves and ciphers", p)
	}
	g := &Generator{TrustDomain: td, Mesh: Mesh{TLSDefaults: TLSDefaults{ECDHCurves: []string{"P-256"}, CipherSuites: []string{"ECDHE-ECDSA-AES128-GCM-SHA256"}}}}
	p := upstreamTLS(t, generate(t, g, snap, sleepInApp).clusters[echoCluster]).GetCommonTlsContext().GetTlsParams()
	if !slices.Equal(p.GetEcdhCurves(), []string{"P-256"}) || !slices.Equal(p.GetCipherSuites(), []string{"ECDHE-ECDSA-AES128-GCM-SHA256"}) {
		t.Errorf("TLS params under mesh tlsDefaults: %v", p)
	}
	if upstreamHTTP(t, cl) != nil {
		t.Errorf("an explicit SNI sets no auto SNI: %v", upstreamHTTP(t, cl))
	}
	// Auto-mTLS does not override the rule: no endpoint is marked.
	for _, l := range c.endpoints[echoCluster].GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			if e.GetMetadata().GetFilterMetadata()[transportSocketMatchKey] != nil {
				t.Errorf("endpoint %v marked for Istio mTLS under SIMPLE", e.GetEndpoint().GetAddress())
			}
		}
	}
}

func TestSimpleWithoutCAOrSNI(t *testing.T) {
	for name, tc := range map[string]struct {
		tls        string
		sanChecked bool
	}{
		"without SANs the server's certificate is checked against the SNI": {`{mode: SIMPLE}`, true},
		"with SANs those are checked instead":                              {`{mode: SIMPLE, subjectAltNames: [a.example.com]}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, originationRule("app", "  trafficPolicy:\n    tls: "+tc.tls+"\n"))
			cl := generate(t, &Generator{TrustDomain: td}, snap, sleepInApp).clusters[echoCluster]
			up := upstreamTLS(t, cl)
			if n := up.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName(); n != "file-root:system" {
				t.Errorf("CA secret %q, want the system roots", n)
			}
			auto := upstreamHTTP(t, cl)
			if up.Sni != "" || !auto.GetAutoSni() || auto.GetAutoSanValidation() != tc.sanChecked {
				t.Errorf("sni %q, upstream options %v", up.Sni, auto)
			}
		})
	}
}

func TestMutualWithFiles(t *testing.T) {
	snap := modeltest.Load(t, originationRule("web", `  trafficPolicy:
    portLevelSettings:
    - port: {number: 7070}
      tls: {mode: MUTUAL, clientCertificate: /certs/c.pem, privateKey: /certs/k.pem, caCertificates: /certs/ca.pem}
`))
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "web"})
	up := upstreamTLS(t, c.clusters["outbound|7070||echo.app.svc.cluster.local"])
	ctx := up.GetCommonTlsContext()
	if len(ctx.TlsCertificateSdsSecretConfigs) != 1 || ctx.TlsCertificateSdsSecretConfigs[0].GetName() != "file-cert:/certs/c.pem~/certs/k.pem" {
		t.Errorf("client certificate %v", ctx.TlsCertificateSdsSecretConfigs)
	}
	if n := ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName(); n != "file-root:/certs/ca.pem" {
		t.Errorf("CA secret %q", n)
	}
	if !slices.Equal(ctx.AlpnProtocols, []string{"h2"}) {
		t.Errorf("gRPC port: ALPN %v, want h2", ctx.AlpnProtocols)
	}
	// The other ports keep auto-mTLS.
	if cl := c.clusters[echoCluster]; len(cl.TransportSocketMatches) != 2 {
		t.Errorf("port 80 without port-level TLS: %v", cl)
	}
}

func TestSubsetOriginatesOverIstioMutual(t *testing.T) {
	snap := modeltest.Load(t, originationRule("app", `  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
  subsets:
  - name: ext
    labels: {version: v2}
    trafficPolicy: {tls: {mode: SIMPLE, sni: legacy.example.com}}
`))
	c := generate(t, &Generator{TrustDomain: td}, snap, sleepInApp)
	if up := upstreamTLS(t, c.clusters["outbound|80|ext|echo.app.svc.cluster.local"]); up.Sni != "legacy.example.com" || up.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "file-root:system" {
		t.Errorf("subset: %v", up)
	}
	if up := upstreamTLS(t, c.clusters[echoCluster]); up.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName() != "default" {
		t.Errorf("service: want ISTIO_MUTUAL, got %v", up)
	}
}

func TestCredentialNameInARuleSelectingTheClient(t *testing.T) {
	const selector = "  workloadSelector: {matchLabels: {app: sleep}}\n"
	policy := `  trafficPolicy:
    tls: {mode: MUTUAL, credentialName: echo-client, subjectAltNames: [echo.example.com]}
`
	snap := modeltest.Load(t, originationRule("app", selector+policy))
	c := generate(t, &Generator{TrustDomain: td}, snap, sleepInApp)
	ctx := upstreamTLS(t, c.clusters[echoCluster]).GetCommonTlsContext()
	cert := ctx.GetTlsCertificateSdsSecretConfigs()
	ca := ctx.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()
	if len(cert) != 1 || cert[0].GetName() != "kubernetes://echo-client" || cert[0].GetSdsConfig().GetAds() == nil {
		t.Errorf("client certificate %v", cert)
	}
	if ca.GetName() != "kubernetes://echo-client-cacert" || ca.GetSdsConfig().GetAds() == nil || ca.GetSdsConfig().GetInitialFetchTimeout() != nil {
		t.Errorf("CA %v", ca)
	}
	if got := sanNames(ctx.GetCombinedValidationContext().GetDefaultValidationContext()); !slices.Equal(got, []string{"echo.example.com"}) {
		t.Errorf("SANs %v", got)
	}

	// The rule applies to no other workload: of its namespace, or of
	// another (it is in the service's namespace); they keep auto-mTLS.
	for _, p := range []*Proxy{{Namespace: "app", Labels: map[string]string{"app": "other"}}, {Namespace: "web", Labels: map[string]string{"app": "sleep"}}} {
		if cl := generate(t, &Generator{TrustDomain: td}, snap, p).clusters[echoCluster]; len(cl.TransportSocketMatches) != 2 {
			t.Errorf("%s/%v: want auto-mTLS, got %v", p.Namespace, p.Labels, cl)
		}
	}
	// A rule without a selector would make every client of its namespace
	// (or, in the root namespace, of the mesh) ask for a Secret of its own
	// namespace: refused, where Istio sends plaintext.
	for _, ns := range []string{"app", "istio-system"} {
		snap = modeltest.Load(t, originationRule(ns, policy))
		refused(t, generate(t, &Generator{TrustDomain: td}, snap, sleepInApp), echoCluster)
	}
}

func TestRefusedSettings(t *testing.T) {
	for name, tls := range map[string]string{
		"insecureSkipVerify without the operator's leave": `{mode: SIMPLE, insecureSkipVerify: true}`,
		"MUTUAL without a client certificate":             `{mode: MUTUAL, caCertificates: /ca.pem}`,
		"MUTUAL without a private key":                    `{mode: MUTUAL, clientCertificate: /c.pem}`,
		"a credentialName naming another namespace":       `{mode: SIMPLE, credentialName: other/secret}`,
		"a credentialName with a scheme":                  `{mode: SIMPLE, credentialName: "configmap://ca"}`,
		"a file path with the SDS name separator":         `{mode: SIMPLE, caCertificates: "/a~b"}`,
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, originationRule("app", "  trafficPolicy:\n    tls: "+tls+"\n"))
			refused(t, generate(t, &Generator{TrustDomain: td}, snap, sleepInApp), echoCluster)
		})
	}
	// What Istio's validation refuses is refused even where istiod
	// allows skipping verification.
	for name, tls := range map[string]string{
		"insecureSkipVerify with a CA":                    `{mode: SIMPLE, insecureSkipVerify: true, caCertificates: /ca.pem}`,
		"insecureSkipVerify with SANs":                    `{mode: MUTUAL, insecureSkipVerify: true, credentialName: c, subjectAltNames: [a]}`,
		"insecureSkipVerify with a SIMPLE credentialName": `{mode: SIMPLE, insecureSkipVerify: true, credentialName: c}`,
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, originationRule("app", "  workloadSelector: {matchLabels: {app: sleep}}\n  trafficPolicy:\n    tls: "+tls+"\n"))
			refused(t, generate(t, &Generator{TrustDomain: td, Mesh: Mesh{AllowInsecureSkipVerify: true}}, snap, sleepInApp), echoCluster)
		})
	}
}

func TestInsecureSkipVerifyWhenAllowed(t *testing.T) {
	g := &Generator{TrustDomain: td, Mesh: Mesh{AllowInsecureSkipVerify: true}}
	snap := modeltest.Load(t, originationRule("app", "  trafficPolicy:\n    tls: {mode: SIMPLE, insecureSkipVerify: true}\n"))
	cl := generate(t, g, snap, sleepInApp).clusters[echoCluster]
	ctx := upstreamTLS(t, cl).GetCommonTlsContext()
	if v, ok := ctx.ValidationContextType.(*tlsv3.CommonTlsContext_ValidationContext); !ok || proto.Size(v.ValidationContext) != 0 {
		t.Errorf("want an empty validation context, got %v", ctx.ValidationContextType)
	}
	if auto := upstreamHTTP(t, cl); !auto.GetAutoSni() || auto.GetAutoSanValidation() {
		t.Errorf("upstream options %v: auto SNI without SAN validation", auto)
	}

	snap = modeltest.Load(t, originationRule("app", "  workloadSelector: {matchLabels: {app: sleep}}\n  trafficPolicy:\n    tls: {mode: MUTUAL, insecureSkipVerify: true, credentialName: c}\n"))
	ctx = upstreamTLS(t, generate(t, g, snap, sleepInApp).clusters[echoCluster]).GetCommonTlsContext()
	if ctx.ValidationContextType != nil || ctx.GetTlsCertificateSdsSecretConfigs()[0].GetName() != "kubernetes://c" {
		t.Errorf("credentialName without verification: %v", ctx)
	}
}

func TestHeadlessServiceOriginates(t *testing.T) {
	snap := modeltest.Load(t, `
apiVersion: v1
kind: Service
metadata: {name: db, namespace: app}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: tcp, port: 5432}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: app}
spec:
  host: db
  trafficPolicy: {tls: {mode: SIMPLE, sni: db.example.com}}
`)
	cl := generate(t, &Generator{TrustDomain: td}, snap, sleepInApp).clusters["outbound|5432||db.app.svc.cluster.local"]
	if cl.GetType() != cluster.Cluster_ORIGINAL_DST || upstreamTLS(t, cl).Sni != "db.example.com" {
		t.Errorf("headless SIMPLE: %v", cl)
	}
}

func TestOriginationKeysFollowTheSettings(t *testing.T) {
	g := &Generator{TrustDomain: td}
	keyOf := func(policy string) string {
		snap := modeltest.Load(t, originationRule("app", policy))
		for _, r := range g.Generate(snap, sleepInApp, resource.ClusterType, []string{echoCluster}, false) {
			return r.Key
		}
		t.Fatal("no cluster")
		return ""
	}
	a := keyOf("  trafficPolicy: {tls: {mode: SIMPLE, sni: a.example.com}}\n")
	b := keyOf("  trafficPolicy: {tls: {mode: SIMPLE, sni: b.example.com}}\n")
	if a == b {
		t.Errorf("two rules with different SNI share the key %q", a)
	}
}
