package interop

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/multicluster/controlplane"
)

const rootCertCM = "istio-ca-root-cert"

// TestPrimaryRemote runs istiod in cluster A with --external-istiod and
// registers cluster B (a second API server) from istioctl's remote
// secret, its reader granted docs/rbac.md's reader rules, and B gets the
// chart's remote profile (istiodRemote.enabled with istiodRemote.injectionURL
// and base.validationURL naming A's istiod): its webhook configurations and
// the primary-remote rules for that reader, and nothing else. Until B's istiod namespace is annotated
// topology.istio.io/controlPlaneClusters naming A, nothing is written in
// B; once it is, A's istiod distributes istio-ca-root-cert there (under a
// Lease in B), keeps B's webhook caBundles, and injects B's pods through
// B's own webhook on /inject/cluster/cluster-b/net/net2, as B's namespace
// labels select. The annotation removed, B stopped, the remote secret
// deleted: each is followed as it should be.
func TestPrimaryRemote(t *testing.T) {
	envA := testenv.Get(t)
	envB := testenv.StartPrivate(t)
	ctx := context.Background()
	istiodNS, nsA := envA.Namespace(t), envA.Namespace(t)
	clientA, clientB := envA.Client(t), envB.Client(t)
	mutating, validating := "istio-sidecar-injector-"+istiodNS, "istio-validator-"+istiodNS

	// B: istiod's namespace (not annotated yet) and the reader; the
	// chart's remote profile comes once A's istiod has an address.
	createNamespace(t, clientB, istiodNS, nil)
	remote := istioctlRemoteSecret(t, envB, clusterB)
	// Namespaces of B are named after istiodNS, unique in A's shared API
	// server too, where some get a namespace of the same name.
	name := func(s string) string { return s + "-" + istiodNS[len(istiodNS)-5:] }
	nsB1 := createNamespace(t, clientB, name("app-1"), nil)

	p := startIstiod(t, "--kubeconfig", envA.Kubeconfig, "--namespace", istiodNS, "--clusterID", clusterA,
		"--external-istiod", "--injection-webhook-config-name", mutating,
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))
	rootFile := publishedRoot(t, envA, nsA)
	root, err := os.ReadFile(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(p.HTTPSAddr)
	if err != nil {
		t.Fatal(err)
	}
	installRemoteProfile(t, clientB, istiodNS, mutating, validating, "https://localhost:"+port)

	registerRemote(t, p, envA, istiodNS, remote)

	t.Run("without the annotation nothing is written in B", func(t *testing.T) {
		waitLogCount(t, p, controlplane.LogNotControlled, 1)
		settle()
		wantNoRootCert(t, clientB)
		wantNoLease(t, clientB, istiodNS)
		wantCABundles(t, clientB, mutating, validating, nil)
		if v := metric(t, p.MonitoringAddr, `bulwark_remote_cluster_controlled{cluster="cluster-b"}`); v != "0" {
			t.Errorf("bulwark_remote_cluster_controlled = %q, want 0", v)
		}
	})

	t.Run("annotated for another cluster: still nothing", func(t *testing.T) {
		annotateNS(t, clientB, istiodNS, "cluster-x, cluster-a") // Istio does not trim
		waitLogCount(t, p, controlplane.LogNotControlled, 2)
		settle()
		wantNoRootCert(t, clientB)
		wantNoLease(t, clientB, istiodNS)
	})

	annotateNS(t, clientB, istiodNS, "cluster-x,"+clusterA)
	t.Run("annotated: istio-ca-root-cert in B's namespaces, one created later too, under a Lease in B", func(t *testing.T) {
		waitRootCert(t, clientB, nsB1, root)
		waitRootCert(t, clientB, istiodNS, root)
		nsB2 := createNamespace(t, clientB, name("app-2"), nil)
		waitRootCert(t, clientB, nsB2, root)
		lease, err := clientB.CoordinationV1().Leases(istiodNS).Get(ctx, "istio-namespace-controller-election", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Fatalf("no holder of the Lease in B: %v", err)
		}
		if v := metric(t, p.MonitoringAddr, `bulwark_remote_cluster_controlled{cluster="cluster-b"}`); v != "1" {
			t.Errorf("bulwark_remote_cluster_controlled = %q, want 1", v)
		}
	})
	t.Run("a tampered ConfigMap in B is restored", func(t *testing.T) {
		tamperRootCert(t, clientB, nsB1)
		waitRootCert(t, clientB, nsB1, root)
	})
	t.Run("B's webhook configurations get the trust bundle as caBundle", func(t *testing.T) {
		eventuallyTrue(t, 30*time.Second, "caBundles written", func() bool { return caBundlesAre(t, clientB, mutating, validating, root) })
	})
	t.Run("B's pods are injected for cluster-b/net2 as B's namespace labels select, not A's", func(t *testing.T) {
		on, off := createNamespace(t, clientB, name("inject-on"), map[string]string{"istio-injection": "enabled"}), createNamespace(t, clientB, name("inject-off"), nil)
		// A's namespaces of the same names say the opposite.
		createNamespace(t, clientA, on, map[string]string{"istio-injection": "disabled"})
		createNamespace(t, clientA, off, map[string]string{"istio-injection": "enabled"})
		pod := createPod(t, envB, on, "app", "app")
		proxy := findProxy(pod)
		if proxy == nil {
			t.Fatalf("the pod of B's labelled namespace is not injected: containers %v", containerNames(pod.Spec.Containers))
		}
		env := map[string]string{}
		for _, e := range proxy.Env {
			env[e.Name] = e.Value
		}
		if env["ISTIO_META_CLUSTER_ID"] != clusterB || env["ISTIO_META_NETWORK"] != "net2" {
			t.Errorf("ISTIO_META_CLUSTER_ID=%q ISTIO_META_NETWORK=%q, want %s and net2", env["ISTIO_META_CLUSTER_ID"], env["ISTIO_META_NETWORK"], clusterB)
		}
		if got := pod.Labels["topology.istio.io/network"]; got != "net2" {
			t.Errorf("pod label topology.istio.io/network=%q, want net2", got)
		}
		if plain := createPod(t, envB, off, "app", "app"); findProxy(plain) != nil {
			t.Error("the pod of B's unlabelled namespace is injected")
		}
	})

	t.Run("the annotation removed: nothing more is written in B", func(t *testing.T) {
		n := logCount(p, controlplane.LogNotControlled)
		annotateNS(t, clientB, istiodNS, "")
		waitLogCount(t, p, controlplane.LogNotControlled, n+1)
		tamperRootCert(t, clientB, nsB1)
		nsB3 := createNamespace(t, clientB, name("app-3"), nil)
		clearCABundle(t, clientB, mutating)
		settle()
		wantRootCertTampered(t, clientB, nsB1)
		if _, err := clientB.CoreV1().ConfigMaps(nsB3).Get(ctx, rootCertCM, metav1.GetOptions{}); err == nil {
			t.Errorf("%s/%s written after the annotation went", nsB3, rootCertCM)
		}
		if caBundlesAre(t, clientB, mutating, "", root) {
			t.Error("the mutating webhook's caBundle was restored after the annotation went")
		}
		if holder, err := leaseHolder(clientB, istiodNS); err != nil || holder != "" {
			t.Errorf("Lease in B still held (%q, %v): a stopping primary releases it", holder, err)
		}
	})

	annotateNS(t, clientB, istiodNS, "*")
	waitRootCert(t, clientB, nsB1, root)
	t.Run("B's API server stopped: A's own work goes on", func(t *testing.T) {
		envB.Stop(t)
		nsA2 := envA.Namespace(t)
		waitRootCert(t, clientA, nsA2, root)
		pod := createPod(t, envA, nsA2, "local-1", "local")
		token := envA.ServiceAccountToken(t, nsA2, "local", []string{"istio-ca"}, pod)
		ca := caTarget{addr: p.SecureGRPCAddr, root: rootFile, san: "istiod." + istiodNS + ".svc"}
		if err := csrErr(t, ca, token, clusterA, "spiffe://cluster.local/ns/"+nsA2+"/sa/local"); err != nil {
			t.Fatalf("a local certificate while B is down: %v", err)
		}
		envB.Restart(t)
		tamperRootCert(t, clientB, nsB1)
		waitRootCert(t, clientB, nsB1, root)
	})

	t.Run("the remote secret deleted: nothing more is written in B", func(t *testing.T) {
		n := logCount(p, controlplane.LogNotControlled)
		if err := clientA.CoreV1().Secrets(istiodNS).Delete(ctx, remote.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLogCount(t, p, controlplane.LogNotControlled, n+1)
		tamperRootCert(t, clientB, nsB1)
		settle()
		wantRootCertTampered(t, clientB, nsB1)
	})
}

// settle gives a write that should not happen the time to happen: the
// log line waited for says the writers have stopped, so anything later is
// a fault, and a fault takes well under this to show.
func settle() { time.Sleep(2 * time.Second) }

func createNamespace(t *testing.T, client kubernetes.Interface, name string, labels map[string]string) string {
	t.Helper()
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// annotateNS sets (value non-empty) or removes the controlPlaneClusters
// annotation of namespace ns.
func annotateNS(t *testing.T, client kubernetes.Interface, ns, value string) {
	t.Helper()
	ctx := context.Background()
	n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	if value == "" {
		delete(n.Annotations, controlplane.Annotation)
	} else {
		n.Annotations[controlplane.Annotation] = value
	}
	if _, err := client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitRootCert waits for ns's istio-ca-root-cert to hold root, and logs
// how long that took.
func waitRootCert(t *testing.T, client kubernetes.Interface, ns string, root []byte) {
	t.Helper()
	start := time.Now()
	eventuallyTrue(t, 30*time.Second, ns+"/"+rootCertCM+" holds A's trust bundle", func() bool {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), rootCertCM, metav1.GetOptions{})
		return err == nil && cm.Data["root-cert.pem"] == string(root)
	})
	t.Logf("%s/%s holds the trust bundle after %v", ns, rootCertCM, time.Since(start).Round(time.Millisecond))
}

const tampered = "not a certificate"

func tamperRootCert(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, rootCertCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"root-cert.pem": tampered}
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func wantRootCertTampered(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), rootCertCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["root-cert.pem"] != tampered {
		t.Errorf("%s/%s restored: istiod wrote in a cluster it no longer controls", ns, rootCertCM)
	}
}

func wantNoRootCert(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", rootCertCM).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		t.Errorf("%s/%s written in B", cm.Namespace, cm.Name)
	}
}

func leaseHolder(client kubernetes.Interface, ns string) (string, error) {
	lease, err := client.CoordinationV1().Leases(ns).Get(context.Background(), "istio-namespace-controller-election", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

func wantNoLease(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	list, err := client.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list.Items {
		t.Errorf("Lease %s/%s written in B", l.Namespace, l.Name)
	}
}

// caBundlesAre reports whether every webhook of the named configurations
// (validating "" skips it) has caBundle want.
func caBundlesAre(t *testing.T, client kubernetes.Interface, mutating, validating string, want []byte) bool {
	t.Helper()
	ctx := context.Background()
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mutating, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range m.Webhooks {
		if string(w.ClientConfig.CABundle) != string(want) {
			return false
		}
	}
	if validating == "" {
		return true
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, validating, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		if string(w.ClientConfig.CABundle) != string(want) {
			return false
		}
	}
	return true
}

func wantCABundles(t *testing.T, client kubernetes.Interface, mutating, validating string, want []byte) {
	t.Helper()
	if !caBundlesAre(t, client, mutating, validating, want) {
		t.Errorf("webhook caBundles in B are not %q", want)
	}
}

func clearCABundle(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	m, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = nil
	}
	if _, err := api.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// logCount counts istiod's log lines about cluster-b holding s.
func logCount(p *istiod, s string) int {
	n := 0
	for line := range strings.SplitSeq(p.logs.String(), "\n") {
		if strings.Contains(line, s) && strings.Contains(line, "cluster="+clusterB) {
			n++
		}
	}
	return n
}

func waitLogCount(t *testing.T, p *istiod, s string, n int) {
	t.Helper()
	eventuallyTrue(t, 30*time.Second, fmt.Sprintf("%d log lines %q", n, s), func() bool { return logCount(p, s) >= n })
}

// waitLogged waits for istiod's log to hold s: its output reaches the
// test through a pipe, after the answer that the line explains.
func waitLogged(t *testing.T, p *istiod, s string) {
	t.Helper()
	eventuallyTrue(t, 10*time.Second, fmt.Sprintf("a log line %q", s), func() bool { return strings.Contains(p.logs.String(), s) })
}

func eventuallyTrue(t *testing.T, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
