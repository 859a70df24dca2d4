package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	pb "istio.io/api/security/v1alpha1"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/nodeagent/caclient/providers/citadel"
	istioca "istio.io/istio/security/pkg/pki/ca"
	"istio.io/istio/security/pkg/pki/util"
	istioserver "istio.io/istio/security/pkg/server/ca"
	"istio.io/istio/security/pkg/server/ca/authenticate/kubeauth"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	kubemetadata "k8s.io/client-go/metadata"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	bulwarkinject "github.com/bulwark-mesh/bulwark/pkg/inject"
	"github.com/bulwark-mesh/bulwark/pkg/migrate"
)

// TestMigrationKeepsIdentityAndTrust moves one workload from Istio's
// istiod to Bulwark installed beside it as revision bulwark, on a real
// apiserver, the two ways they share a root: Bulwark reading the
// istio-ca-secret Istio's own CA code made, and both plugging in one
// cacerts set.
//
// Before the move the pod is what Istio's injector makes of it (no
// PROXY_CONFIG_XDS_AGENT, as Istio leaves it) and Istio's CA server
// signs its certificate for the pod's bound token; after the namespace is
// relabelled istio.io/rev=bulwark, the restarted pod is what Bulwark's
// injector makes of it and Bulwark's CSR API signs for it, asked by
// Istio's own CA client. The two certificates carry the same SPIFFE ID;
// istio-ca-root-cert as Bulwark publishes it holds exactly the root Istio
// publishes; each certificate verifies under the other control plane's
// roots, and the old and the new pod complete mTLS with each other in
// both directions. The old pod is counted and named as one a root
// rotation does not reach.
//
// Not parallel: every istiod in Kubernetes mode writes istio-ca-root-cert
// into every namespace of the shared apiserver, so another one running
// meanwhile would put its own root into this test's namespace.
func TestMigrationKeepsIdentityAndTrust(t *testing.T) {
	for name, pluggedIn := range map[string]bool{
		"Bulwark reads Istio's istio-ca-secret": false,
		"both plug in one cacerts set":          true,
	} {
		t.Run(name, func(t *testing.T) { testMigration(t, pluggedIn) })
	}
}

func testMigration(t *testing.T, pluggedIn bool) {
	env := testenv.Get(t)
	client := env.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, apps := env.Namespace(t), env.Namespace(t)

	// Istio's istiod's CA, made by Istio's code.
	var istioCA *istioca.IstioCA
	cacertsDir := filepath.Join(t.TempDir(), "cacerts")
	if pluggedIn {
		writeIstioCACerts(t, cacertsDir)
		// As istiod loads /etc/cacerts.
		opts, err := istioca.NewPluggedCertIstioCAOptions(istioca.SigningCAFileBundle{
			RootCertFile:    filepath.Join(cacertsDir, "root-cert.pem"),
			CertChainFiles:  []string{filepath.Join(cacertsDir, "cert-chain.pem")},
			SigningCertFile: filepath.Join(cacertsDir, "ca-cert.pem"),
			SigningKeyFile:  filepath.Join(cacertsDir, "ca-key.pem"),
		}, 24*time.Hour, 90*24*time.Hour, 2048)
		if err != nil {
			t.Fatalf("Istio's plugged-in CA: %v", err)
		}
		if istioCA, err = istioca.NewIstioCA(opts); err != nil {
			t.Fatal(err)
		}
	} else {
		opts, err := istioca.NewSelfSignedIstioCAOptions(ctx, 20, 10*365*24*time.Hour, time.Hour, 24*time.Hour, 90*24*time.Hour,
			trustDomain, false, false, cp, client.CoreV1(), "", false, 2048)
		if err != nil {
			t.Fatalf("Istio's self-signed CA: %v", err)
		}
		if istioCA, err = istioca.NewIstioCA(opts); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Secrets(cp).Get(ctx, "istio-ca-secret", metav1.GetOptions{}); err != nil {
			t.Fatalf("Istio's CA wrote no istio-ca-secret: %v", err)
		}
	}
	istioRoots := istioCA.GetCAKeyCertBundle().GetRootCertPem()

	// Bulwark beside it, as revision bulwark in the same namespace.
	p := startIstiod(t, "--kubeconfig", env.Kubeconfig, "--namespace", cp, "--revision", "bulwark",
		"--cacerts-dir", cacertsDir, "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))

	// The old pod, injected by Istio, then the namespace relabelled and
	// the pod restarted into Bulwark's revision.
	const sa = "reviews"
	if _, err := client.CoreV1().ServiceAccounts(apps).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labelNamespace(ctx, t, env, apps, map[string]string{"istio-injection": "enabled"})
	istioInj := newInjectors(t, apps, "")
	delete(istioInj.mesh.DefaultConfig.ProxyMetadata, bulwarkinject.EnvProxyConfigXDSAgent) // Istio's default: off
	oldPod, err := istioInj.istio(workloadPod(apps, "reviews-v1", sa))
	if err != nil {
		t.Fatalf("Istio's injector: %v", err)
	}
	if oldPod, err = client.CoreV1().Pods(apps).Create(ctx, oldPod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Istio's pod: %v", err)
	}

	labelNamespace(ctx, t, env, apps, map[string]string{"istio.io/rev": "bulwark"})
	newPod, _, err := newInjectors(t, apps, `{"revision":"bulwark"}`).bulwark(workloadPod(apps, "reviews-v2", sa))
	if err != nil {
		t.Fatalf("Bulwark's injector: %v", err)
	}
	if newPod, err = client.CoreV1().Pods(apps).Create(ctx, newPod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Bulwark's pod: %v", err)
	}
	for pod, want := range map[*corev1.Pod]bulwarkinject.InjectedProxy{
		oldPod: {Revision: "default", PCDS: false},
		newPod: {Revision: "bulwark", PCDS: true},
	} {
		if got, ok := bulwarkinject.InjectedProxyOf(pod); !ok || got != want {
			t.Errorf("pod %s: injected %v as %+v, want %+v", pod.Name, ok, got, want)
		}
	}

	// The old pod is counted and named; the new one is not.
	listed, err := migrate.ListProxies(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	listed = slices.DeleteFunc(listed, func(px migrate.Proxy) bool { return px.Namespace != apps })
	if want := []migrate.Proxy{{Namespace: apps, Name: "reviews-v1", Revision: "default"}}; !slices.Equal(listed, want) {
		t.Errorf("pods without PCDS in %s: %v, want %v", apps, listed, want)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if v := metric(t, p.MonitoringAddr, `bulwark_proxies_without_pcds{revision="default"}`); v != "" && v != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("istiod does not count the old pod in bulwark_proxies_without_pcds")
		}
	}

	// The preflight reads the CA as istiod does: Istio's own
	// istio-ca-secret holds the root both sign under.
	if !pluggedIn {
		checkSharedRoot(ctx, t, env, cp, istioRoots)
	}

	// Certificates: the old pod's from Istio's CA server, the new pod's
	// from Bulwark's, each for the pod's own bound token.
	wantID := "spiffe://" + trustDomain + "/ns/" + apps + "/sa/" + sa
	oldChain, oldKey := istioCertificate(ctx, t, istioCA, wantID, env.ServiceAccountToken(t, apps, sa, []string{caAudience}, oldPod))
	bulwarkRootFile := publishedRoot(t, env, apps)
	newChain, newKey := bulwarkCertificate(t, p, "istiod-bulwark."+cp+".svc", bulwarkRootFile, wantID,
		env.ServiceAccountToken(t, apps, sa, []string{caAudience}, newPod))

	oldLeaf, newLeaf := parseCerts(t, []byte(oldChain[0]))[0], parseCerts(t, []byte(newChain[0]))[0]
	for who, leaf := range map[string]*x509.Certificate{"Istio's": oldLeaf, "Bulwark's": newLeaf} {
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantID {
			t.Errorf("%s certificate names %v, want exactly %s", who, leaf.URIs, wantID)
		}
	}

	// The trust bundle, both views: what Istio publishes as
	// istio-ca-root-cert (its CA's root-cert.pem) and what Bulwark does.
	bulwarkRoots := mustRead(t, bulwarkRootFile)
	if got, want := rawSet(parseCerts(t, bulwarkRoots)), rawSet(parseCerts(t, istioRoots)); !slices.Equal(got, want) {
		t.Errorf("Bulwark's istio-ca-root-cert holds %d roots, Istio's %d, not the same", len(got), len(want))
	}
	// Both istiods keep the ConfigMap during the move, each rewriting it
	// when its bytes differ from its own: equal bytes, or they would
	// rewrite it after each other without end.
	if !bytes.Equal(bulwarkRoots, istioRoots) {
		t.Errorf("istio-ca-root-cert as Bulwark writes it:\n%s\nas Istio writes it:\n%s", bulwarkRoots, istioRoots)
	}
	bulwarkPool, istioPool := poolOf(t, bulwarkRoots), poolOf(t, istioRoots)
	if err := verifyChain(oldChain, bulwarkPool); err != nil {
		t.Errorf("Istio's certificate under Bulwark's roots: %v", err)
	}
	if err := verifyChain(newChain, istioPool); err != nil {
		t.Errorf("Bulwark's certificate under Istio's roots: %v", err)
	}

	// mTLS between the pods, each trusting what its control plane gave
	// it, in both directions.
	oldCert, newCert := keyPair(t, oldChain, oldKey), keyPair(t, newChain, newKey)
	for name, c := range map[string]struct {
		server, client           tls.Certificate
		serverRoots, clientRoots *x509.CertPool
	}{
		"the old pod calls the new": {server: newCert, serverRoots: bulwarkPool, client: oldCert, clientRoots: istioPool},
		"the new pod calls the old": {server: oldCert, serverRoots: istioPool, client: newCert, clientRoots: bulwarkPool},
	} {
		serverSaw, clientSaw, err := handshake(c.server, c.serverRoots, c.client, c.clientRoots)
		if err != nil || serverSaw != wantID || clientSaw != wantID {
			t.Errorf("%s: mTLS %v; server saw %q, client saw %q", name, err, serverSaw, clientSaw)
		}
	}
}

// writeIstioCACerts writes a plugged-in CA set as Istio's tooling makes
// one: a root and an intermediate that signs, by Istio's certificate code.
func writeIstioCACerts(t *testing.T, dir string) {
	t.Helper()
	rootPEM, rootKeyPEM, err := util.GenCertKeyFromOptions(util.CertOptions{
		TTL: 10 * 365 * 24 * time.Hour, Org: trustDomain, IsCA: true, IsSelfSigned: true, RSAKeySize: 2048,
	})
	if err != nil {
		t.Fatal(err)
	}
	rootCert, err := util.ParsePemEncodedCertificate(rootPEM)
	if err != nil {
		t.Fatal(err)
	}
	rootKey, err := util.ParsePemEncodedKey(rootKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	interPEM, interKeyPEM, err := util.GenCertKeyFromOptions(util.CertOptions{
		TTL: 5 * 365 * 24 * time.Hour, Org: trustDomain, IsCA: true, RSAKeySize: 2048,
		SignerCert: rootCert, SignerPriv: rootKey, Host: "istiod." + trustDomain,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "root-cert.pem"), rootPEM)
	writeFile(t, filepath.Join(dir, "ca-cert.pem"), interPEM)
	writeFile(t, filepath.Join(dir, "ca-key.pem"), interKeyPEM)
	writeFile(t, filepath.Join(dir, "cert-chain.pem"), append(append([]byte{}, interPEM...), rootPEM...))
}

// istioCertificate asks Istio's CA server, over Istio's CA as istiod runs
// it with its Kubernetes token authenticator (a TokenReview on the
// apiserver), for a certificate as the pod holding token, its agent
// asking for id. It returns the chain and the key.
func istioCertificate(ctx context.Context, t *testing.T, ca *istioca.IstioCA, id, token string) ([]string, []byte) {
	t.Helper()
	env := testenv.Get(t)
	authn := kubeauth.NewKubeJWTAuthenticator(meshwatcher.NewTestWatcher(mesh.DefaultMeshConfig()), env.Client(t), clusterID, nil, nil)
	srv, err := istioserver.New(ca, 24*time.Hour, []security.Authenticator{authn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, keyPEM, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
	if err != nil {
		t.Fatal(err)
	}
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token, "clusterid", clusterID))
	// As on istiod's TLS port, the agent presenting no certificate.
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, AuthInfo: credentials.TLSInfo{}})
	resp, err := srv.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(csrPEM), ValidityDuration: int64(certTTL / time.Second)})
	if err != nil {
		t.Fatalf("Istio's CA server: %v", err)
	}
	return resp.CertChain, keyPEM
}

// bulwarkCertificate asks Bulwark's CSR API with Istio's CA client, as
// the new pod's agent does, trusting rootFile.
func bulwarkCertificate(t *testing.T, p *istiod, san, rootFile, id, token string) ([]string, []byte) {
	t.Helper()
	client, err := citadel.NewCitadelClient(&security.Options{
		CAEndpoint: p.SecureGRPCAddr, CAEndpointSAN: san, ClusterID: clusterID, CredFetcher: staticToken(token),
	}, &citadel.TLSOptions{RootCert: rootFile})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	csrPEM, keyPEM, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := client.CSRSign(csrPEM, int64(certTTL/time.Second))
	if err != nil {
		t.Fatalf("Bulwark's CSR API: %v", err)
	}
	return chain, keyPEM
}

// workloadPod is the pod a Deployment would create for the workload.
func workloadPod(ns, name, sa string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "reviews", "version": name[len(name)-2:]}},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "reviews", Image: "example.invalid/reviews:1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9080}}}},
		},
	}
}

func labelNamespace(ctx context.Context, t *testing.T, env *testenv.Env, name string, labels map[string]string) {
	t.Helper()
	client := env.Client(t)
	ns, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = labels
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func rawSet(certs []*x509.Certificate) []string {
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = string(c.Raw)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func poolOf(t *testing.T, pemData []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range parseCerts(t, pemData) {
		pool.AddCert(c)
	}
	return pool
}

// verifyChain verifies a CSR answer's leaf, with its intermediates, under
// roots, for both mTLS directions.
func verifyChain(chain []string, roots *x509.CertPool) error {
	certs, err := parseAll([]byte(strings.Join(chain, "")))
	if err != nil {
		return err
	}
	return verifyLeaf(certs, roots)
}

func verifyLeaf(certs []*x509.Certificate, roots *x509.CertPool) error {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return err
		}
	}
	return nil
}

func parseAll(pemData []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		block, rest := pem.Decode(pemData)
		if block == nil {
			break
		}
		pemData = rest
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate")
	}
	return out, nil
}

func keyPair(t *testing.T, chain []string, keyPEM []byte) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair([]byte(strings.Join(chain, "")), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handshake runs mTLS between a server and a client over a pipe, each
// verifying the other's chain under its roots as Envoy does (the
// identity is left to authorization), and returns the SPIFFE ID each saw.
func handshake(server tls.Certificate, serverRoots *x509.CertPool, client tls.Certificate, clientRoots *x509.CertPool) (serverSaw, clientSaw string, err error) {
	verify := func(roots *x509.CertPool, saw *string) func([][]byte, [][]*x509.Certificate) error {
		return func(raw [][]byte, _ [][]*x509.Certificate) error {
			var certs []*x509.Certificate
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs = append(certs, c)
			}
			if len(certs) == 0 {
				return errors.New("no peer certificate")
			}
			if err := verifyLeaf(certs, roots); err != nil {
				return err
			}
			if len(certs[0].URIs) == 1 {
				*saw = certs[0].URIs[0].String()
			}
			return nil
		}
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, &tls.Config{
		Certificates: []tls.Certificate{server}, ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: verify(serverRoots, &serverSaw), MinVersion: tls.VersionTLS12,
	})
	cli := tls.Client(b, &tls.Config{
		Certificates: []tls.Certificate{client}, InsecureSkipVerify: true, // verified below, as Envoy does, without a hostname
		VerifyPeerCertificate: verify(clientRoots, &clientSaw), MinVersion: tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- srv.HandshakeContext(ctx) }()
	cerr := cli.HandshakeContext(ctx)
	serr := <-errc
	if cerr != nil || serr != nil {
		return serverSaw, clientSaw, fmt.Errorf("client: %v; server: %v", cerr, serr)
	}
	return serverSaw, clientSaw, nil
}

// checkSharedRoot runs istiod migrate check's logic on the cluster and
// expects it to find Bulwark signing with the key of the istio-ca-secret
// Istio's CA wrote, under Istio's root.
func checkSharedRoot(ctx context.Context, t *testing.T, env *testenv.Env, ns string, istioRoots []byte) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := kubemetadata.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	r, err := migrate.Check(ctx, migrate.Config{
		Client: env.Client(t), Dynamic: dyn, Metadata: meta,
		Namespace: ns, Revision: "bulwark", AllowUnsupported: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := r.CA
	if c.Err != nil || !c.IstioCASecret || !c.SameRoot() || !strings.Contains(c.Bulwark.Where, ns+"/istio-ca-secret") {
		var b strings.Builder
		r.WriteText(&b)
		t.Errorf("migrate check does not find Bulwark signing under Istio's root in istio-ca-secret:\n%s", b.String())
	}
	if want := parseCerts(t, istioRoots); c.IstioRoot == nil || !c.IstioRoot.Equal(want[0]) {
		t.Errorf("migrate check reads another root than Istio's from istio-ca-secret")
	}
}
