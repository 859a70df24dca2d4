package interop

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networkingapi "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// The gateway of TestPilotAgentRouterCredential: the istio/gateway chart's
// labels for `helm install istio-ingressgateway istio/gateway`.
var ingressLabels = map[string]string{"app": "istio-ingressgateway", "istio": "ingressgateway"}

// TestPilotAgentRouterCredential runs Istio's pilot-agent, unmodified and
// in router mode (`proxy router`, as the gateway injection template runs
// it), with the stand-in as Envoy, against istiod in Kubernetes mode on the
// test apiserver. A Gateway selecting the pod terminates TLS with a
// credentialName: the listener names the Secret `kubernetes://<name>`
// over ADS, the stand-in asks for it on its ADS stream, pilot-agent's xDS
// proxy forwards the request to istiod over its own authenticated stream,
// and istiod serves the Secret of the pod's namespace once the pod's
// service account may get it (a Role naming that one Secret). A rotation of
// the Secret through the API reaches the stand-in. A server naming a
// Secret of the same namespace the service account may not get leaves the
// stand-in without it (istiod counts the refusal); one naming a Secret of
// another namespace, which the service account may get there, is never
// served either: no listener names it and nothing held carries its
// certificate.
//
// Not parallel, for the reason TestPilotAgentProxylessGRPC gives.
func TestPilotAgentRouterCredential(t *testing.T) {
	bins := peerBinariesFor(t)
	env := testenv.Get(t)
	istiodNS, ns, other := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	installGatewayCRDs(t, env)
	w := workload{Name: "istio-ingressgateway-0", Namespace: ns, ServiceAccount: "istio-ingressgateway",
		IP: hostAddress(t), Labels: ingressLabels}

	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	client := env.Client(t)
	pod := createRunningPod(ctx, t, env, w)
	root := catest.NewRoot(t)
	const (
		secret    = "ingress-cert"
		forbidden = "ingress-forbidden"
	)
	first := servingLeaf(t, root, "a.example.com")
	createTLSSecret(ctx, t, env, ns, secret, first)
	createTLSSecret(ctx, t, env, ns, forbidden, servingLeaf(t, root, "b.example.com"))
	grantSecretGet(ctx, t, env, ns, secret, w)
	// The same name in another namespace, which the gateway's service
	// account may get there: the namespace alone must keep it out.
	foreign := servingLeaf(t, root, "c.example.com")
	createTLSSecret(ctx, t, env, other, secret, foreign)
	grantSecretGet(ctx, t, env, other, secret, w)

	gateways := istioClient(t, env).NetworkingV1().Gateways(ns)
	gw := &networkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: ns},
		Spec: networkingapi.Gateway{
			Selector: map[string]string{"istio": "ingressgateway"},
			Servers:  []*networkingapi.Server{simpleServer(443, "https", "a.example.com", secret)},
		},
	}
	if _, err := gateways.Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create gateway: %v", err)
	}

	p := startIstiod(t, "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"),
		"--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		"--serving-dns-names", caSAN)
	rootFile := publishedRoot(t, env, ns)
	_, port, err := net.SplitHostPort(p.SecureGRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	token := env.ServiceAccountToken(t, ns, w.ServiceAccount, []string{"istio-ca"}, pod)
	start := time.Now()
	// The gateway injection template's environment beside the one every
	// istio-proxy container has.
	a := startEnvoyAgentMode(t, bins, w, token, rootFile, "localhost:"+port, "router",
		"ISTIO_META_OWNER=kubernetes://apis/apps/v1/namespaces/"+ns+"/deployments/"+w.Labels["app"])
	a.waitReady(t, envoyWait)
	t.Logf("pilot-agent (router) with the stand-in ready %v after start", time.Since(start).Round(time.Millisecond))

	name := "kubernetes://" + secret
	st := a.waitState(t, envoyWait, func(st *standinState) string {
		if r := routerProblem(st); r != "" {
			return r
		}
		if l := string(st.Resources["LDS"]["0.0.0.0_443"].Resource); !strings.Contains(l, name) {
			return "listener 0.0.0.0_443 does not name " + name + " yet"
		}
		if !holds(st, name, first) {
			return name + " not held with the Secret's certificate"
		}
		if st.Server.State != "LIVE" {
			return "server " + st.Server.State
		}
		return ""
	})

	t.Run("the node is a router and the agent forwards the credentialName over ADS", func(t *testing.T) {
		if !strings.HasPrefix(st.Node.ID, "router~"+w.IP+"~"+w.Name+"."+ns+"~") {
			t.Errorf("node ID %q, want router~%s~%s.%s~…", st.Node.ID, w.IP, w.Name, ns)
		}
		if sds := st.XDS["SDS"]; sds == nil || !slices.Contains(sds.Subscribed, name) || sds.ACKs == 0 {
			t.Errorf("the stand-in's ADS stream did not subscribe to and ACK %s: %+v", name, sds)
		}
		if ts := st.XDS["SDS"]; ts != nil && ts.NACKs > 0 {
			t.Errorf("SDS over ADS NACKed: %s", ts.LastNACK)
		}
	})

	t.Run("a rotation of the Secret through the API reaches the stand-in", func(t *testing.T) {
		second := servingLeaf(t, root, "a.example.com")
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		secrets := client.CoreV1().Secrets(ns)
		s, err := secrets.Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data = tlsData(second)
		updated := time.Now()
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update secret: %v", err)
		}
		a.waitState(t, envoyWait, func(st *standinState) string {
			if r := routerProblem(st); r != "" {
				return r
			}
			if !holds(st, name, second) {
				return name + " does not hold the rotated certificate yet"
			}
			return ""
		})
		t.Logf("Secret update → rotated certificate held by the stand-in: %v", time.Since(updated).Round(time.Millisecond))
	})

	t.Run("a Secret its service account may not get, and one of another namespace, are never held", func(t *testing.T) {
		const unauthorized = `bulwark_sds_refused_total{reason="unauthorized"}`
		refusedBefore := metric(t, p.MonitoringAddr, unauthorized)
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		cur, err := gateways.Get(ctx, gw.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Servers = append(cur.Spec.Servers,
			simpleServer(8444, "https-forbidden", "b.example.com", forbidden),
			simpleServer(8445, "https-foreign", "c.example.com", other+"/"+secret),
			simpleServer(8446, "https-foreign-kube", "c.example.com", "kubernetes://"+other+"/"+secret))
		if _, err := gateways.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update gateway: %v", err)
		}
		st := a.waitState(t, envoyWait, func(st *standinState) string {
			if ts := st.XDS["LDS"]; ts != nil && ts.NACKs > 0 {
				return "LDS NACKed: " + ts.LastNACK
			}
			if l := string(st.Resources["LDS"]["0.0.0.0_8444"].Resource); !strings.Contains(l, "kubernetes://"+forbidden) {
				return "listener 0.0.0.0_8444 does not name " + forbidden + " yet"
			}
			if got := metric(t, p.MonitoringAddr, unauthorized); got == refusedBefore {
				return "istiod has not refused " + forbidden + " yet (" + unauthorized + " " + got + ")"
			}
			return ""
		})
		// Let a wrongly served answer arrive, were one on its way.
		time.Sleep(time.Second)
		st = a.state(t)
		for n, held := range st.Resources["SDS"] {
			if strings.Contains(n, forbidden) {
				t.Errorf("the stand-in holds %s, which its service account may not get", n)
			}
			if strings.Contains(string(held.Resource), base64.StdEncoding.EncodeToString(foreign.certPEM)) || strings.Contains(n, other) {
				t.Errorf("the stand-in holds %s with the certificate of namespace %s's Secret", n, other)
			}
		}
		for l, held := range st.Resources["LDS"] {
			if strings.Contains(string(held.Resource), other+"/") {
				t.Errorf("listener %s names a Secret of namespace %s", l, other)
			}
		}
		if waits := st.Warming["listener 0.0.0.0_8444"]; !strings.Contains(fmt.Sprint(waits), "kubernetes://"+forbidden) {
			t.Errorf("listener 0.0.0.0_8444 waits for %v, want the refused secret", waits)
		}
		if !holds(st, name, nil) {
			t.Errorf("the allowed Secret %s is no longer held", name)
		}
		if _, warming := st.Warming["listener 0.0.0.0_443"]; warming {
			t.Errorf("listener 0.0.0.0_443 warms again: %v", st.Warming["listener 0.0.0.0_443"])
		}
	})
}

// routerProblem is what is wrong with a router stand-in's xDS so far: a
// NACK of any type.
func routerProblem(st *standinState) string {
	for _, typ := range []string{"CDS", "EDS", "LDS", "RDS", "SDS"} {
		if ts := st.XDS[typ]; ts != nil && ts.NACKs > 0 {
			return fmt.Sprintf("%s NACKed: %s", typ, ts.LastNACK)
		}
	}
	return ""
}

// holds reports whether the stand-in holds the ADS secret name, carrying
// leaf's certificate when leaf is not nil.
func holds(st *standinState, name string, leaf *servingCert) bool {
	held, ok := st.Resources["SDS"][name]
	if !ok {
		return false
	}
	return leaf == nil || strings.Contains(string(held.Resource), base64.StdEncoding.EncodeToString(leaf.certPEM))
}

// servingCert is a gateway's serving certificate and key, PEM.
type servingCert struct{ certPEM, keyPEM []byte }

// servingLeaf is a server certificate for host under root.
func servingLeaf(t testing.TB, root *catest.Cert, host string) *servingCert {
	t.Helper()
	leaf := catest.NewIntermediate(t, root, catest.WithoutCA(), catest.WithCommonName(host),
		func(c *x509.Certificate, _ *crypto.Signer) { c.DNSNames = []string{host} })
	return &servingCert{certPEM: leaf.CertPEM, keyPEM: leaf.KeyPEM}
}

func tlsData(c *servingCert) map[string][]byte {
	return map[string][]byte{"tls.crt": c.certPEM, "tls.key": c.keyPEM}
}

func createTLSSecret(ctx context.Context, t testing.TB, env *testenv.Env, ns, name string, c *servingCert) {
	t.Helper()
	if _, err := env.Client(t).CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       tlsData(c),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret %s/%s: %v", ns, name, err)
	}
}

// grantSecretGet lets w's service account get the one Secret ns/name: a
// Role naming it, bound to the account.
func grantSecretGet(ctx context.Context, t testing.TB, env *testenv.Env, ns, name string, w workload) {
	t.Helper()
	rbac := env.Client(t).RbacV1()
	role := "read-" + name
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: role, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{name}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role: %v", err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: w.ServiceAccount, Namespace: w.Namespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding: %v", err)
	}
}

// simpleServer is an HTTPS server terminating TLS (SIMPLE) for host with
// the certificate of credential.
func simpleServer(port uint32, name, host, credential string) *networkingapi.Server {
	return &networkingapi.Server{
		Port:  &networkingapi.Port{Number: port, Name: name, Protocol: "HTTPS"},
		Hosts: []string{host},
		Tls:   &networkingapi.ServerTLSSettings{Mode: networkingapi.ServerTLSSettings_SIMPLE, CredentialName: credential},
	}
}

// installGatewayCRDs installs the Istio CRDs of the chart and Istio's own
// Gateway and VirtualService CRDs (manifests/charts/base/files/
// crd-all.gen.yaml of the istio.io/istio this module requires), which the
// istio/base chart installs in a cluster and Bulwark's chart does not.
func installGatewayCRDs(t testing.TB, env *testenv.Env) {
	t.Helper()
	crds := chartCRDs(t)
	routing, err := istioRoutingCRDs()
	if err != nil {
		t.Fatal(err)
	}
	env.InstallCRDs(t, append(crds, routing)...)
}

// istioRoutingCRDs writes Istio's Gateway and VirtualService CRDs to a
// file, once per test binary.
var istioRoutingCRDs = sync.OnceValues(func() (string, error) {
	template, err := istioBootstrapTemplate() // …/tools/packaging/common/envoy_bootstrap.json
	if err != nil {
		return "", err
	}
	module := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(template))))
	all, err := os.ReadFile(filepath.Join(module, "manifests", "charts", "base", "files", "crd-all.gen.yaml"))
	if err != nil {
		return "", fmt.Errorf("Istio's CRDs: %w", err)
	}
	want := []string{"gateways.networking.istio.io", "virtualservices.networking.istio.io"}
	var out []string
	for _, doc := range strings.Split(string(all), "\n---\n") {
		var meta struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return "", fmt.Errorf("Istio's CRDs: %w", err)
		}
		if slices.Contains(want, meta.Metadata.Name) {
			out = append(out, doc)
		}
	}
	if len(out) != len(want) {
		return "", fmt.Errorf("Istio's CRDs: found %d of %v", len(out), want)
	}
	// Under the ignored .cache, beside the built peers, rewritten each run.
	dir := filepath.Join(repoRoot, ".cache", "interop", "crds")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "istio-routing.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(out, "\n---\n")), 0o600)
})

// spiffeURI is the SPIFFE ID of ns/sa in the test trust domain.
func spiffeURI(ns, sa string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: "/ns/" + ns + "/sa/" + sa}
}
