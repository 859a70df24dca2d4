// Package testenv runs a real etcd and kube-apiserver for tests.
//
// One apiserver runs per test binary (that is, per package under test) and
// is shared by the package's tests; tests stay independent by working in
// their own namespace. Wire it up once per package:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		env := testenv.Get(t)     // started on first use, then shared
//		ns := env.Namespace(t)    // unique, with a "default" ServiceAccount
//		client := env.Client(t)   // admin (system:masters) clientset
//		token := env.ServiceAccountToken(t, ns, "app", []string{"istio-ca"}, nil)
//		_ = env.RESTConfigForToken(token)
//	}
//
// Run stops etcd and the apiserver after the tests and removes their run
// directory. Get starts them lazily, so a package whose selected tests never
// call Get pays nothing.
//
// # Binaries
//
// The binaries are built from their Go modules by `make testenv`
// (hack/testenv/build.sh) into .cache/testenv/bin at the repository root.
// A missing binary fails the test with a message naming `make testenv`; it
// never skips. When a test of the package failed, the run directory (logs,
// certificates, etcd data) is kept for inspection and its path printed.
//
// # What the apiserver offers
//
//   - TLS on a free loopback port with a per-run CA ([Env.CAPEM]); the admin
//     identity is a static token in group system:masters ([Env.Config]).
//   - Authorization Node,RBAC, so RBAC is enforced for every other caller.
//   - ServiceAccount tokens: TokenRequest (also bound to a Pod), TokenReview,
//     and a real OIDC issuer at [Env.Issuer] whose discovery document and
//     JWKS can be fetched without credentials.
//   - The default admission plugins, including ServiceAccount,
//     NamespaceLifecycle, PodSecurity and the admission webhooks.
//
// # What does not happen
//
// No kube-controller-manager, scheduler or kubelet runs. Therefore:
//
//   - Namespaces get no "default" ServiceAccount by themselves;
//     [Env.Namespace] creates one so Pods pass ServiceAccount admission.
//   - A deleted namespace stays Terminating; its objects are not removed.
//   - Pods are never scheduled and stay Pending; nothing is garbage
//     collected (ownerReferences have no effect) and Endpoints/EndpointSlices
//     are not derived from Services.
//   - No legacy Secret-based ServiceAccount tokens are minted, and no
//     kube-root-ca.crt ConfigMaps are published; use TokenRequest.
//   - Deleting a pod revokes the tokens bound to it only after up to 10s:
//     the apiserver caches successful token authentications that long.
//   - Webhooks must be reached by URL (https://127.0.0.1:port/...): nothing
//     routes Service references, and Endpoints may not hold loopback IPs.
package testenv
