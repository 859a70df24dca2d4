package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Env is a running etcd + kube-apiserver. Its methods are safe for
// concurrent use by parallel tests.
type Env struct {
	// Config authenticates as the admin, a member of system:masters.
	// Copy it before changing it (rest.CopyConfig).
	Config *rest.Config
	// CAPEM is the PEM certificate of the CA that signed the apiserver's
	// serving certificate.
	CAPEM []byte
	// URL is the apiserver's base URL, https://127.0.0.1:<port>.
	URL string
	// Issuer is the issuer of ServiceAccount tokens; it serves
	// Issuer+"/.well-known/openid-configuration" to anyone.
	Issuer string
	// Kubeconfig is the path of a kubeconfig file for the admin, for
	// programs started by tests (istiod --kubeconfig).
	Kubeconfig string
	// StartupTime is how long start took, binaries found to apiserver ready.
	StartupTime time.Duration

	roots   *x509.CertPool
	cluster *cluster
	// private is set for an environment of StartPrivate, which tests may
	// stop and restart.
	private *privateState
}

// shared is the one environment of a test binary. It is package state on
// purpose: one apiserver per test binary is the point of this package.
var shared struct {
	mu     sync.Mutex
	inMain bool
	once   sync.Once
	env    *Env
	err    error
}

// Run runs the tests and then stops the environment if a test started it;
// when a test failed, the run directory (apiserver and etcd logs) is kept
// and its path printed. Call it from TestMain: os.Exit(testenv.Run(m)).
func Run(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	env := shared.env
	shared.mu.Unlock()
	if env != nil {
		env.cluster.keep = code != 0
		env.cluster.stop()
	}
	return code
}

// Get returns the test binary's environment, starting it on first use. It
// fails the test when the environment cannot start, for example when the
// binaries have not been built (`make testenv`).
func Get(t testing.TB) *Env {
	t.Helper()
	shared.mu.Lock()
	inMain := shared.inMain
	shared.mu.Unlock()
	if !inMain {
		t.Fatal("testenv: TestMain must call testenv.Run(m), which stops the apiserver after the tests")
	}
	shared.once.Do(func() {
		env, err := start()
		shared.mu.Lock()
		shared.env, shared.err = env, err
		shared.mu.Unlock()
	})
	if shared.err != nil {
		t.Fatalf("testenv: start kube-apiserver: %v", shared.err)
	}
	env := shared.env
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: last lines of %s:\n%s", env.cluster.apiserver.logPath,
				env.cluster.apiserver.logTail(logTailLines))
		}
	})
	return env
}

func newEnv(url string, keys *pki, c *cluster) *Env {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(keys.caPEM)
	e := &Env{
		CAPEM:   keys.caPEM,
		URL:     url,
		Issuer:  url,
		roots:   roots,
		cluster: c,
	}
	e.Config = e.RESTConfigForToken(keys.adminToken)
	return e
}

// RESTConfigForToken returns a config for the apiserver that authenticates
// with the bearer token, for example a ServiceAccount token.
func (e *Env) RESTConfigForToken(token string) *rest.Config {
	return &rest.Config{
		Host:            e.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), e.CAPEM...)},
		// Tests make bursts of requests; client-side throttling only slows them.
		QPS:   200,
		Burst: 400,
	}
}

// Client returns an admin clientset.
func (e *Env) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(rest.CopyConfig(e.Config))
	if err != nil {
		t.Fatalf("testenv: clientset: %v", err)
	}
	return c
}

// HTTPClient returns a plain HTTP client that trusts the apiserver's CA and
// sends no credentials, as an OIDC verifier fetching discovery would.
func (e *Env) HTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: e.roots, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}
