package kube

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// startIstiod runs one istiod with exactly the RBAC of docs/rbac.md (the
// chart's) and its model from the API server, and waits until it is ready.
func startIstiod(t *testing.T, env *testenv.Env) *istiod {
	t.Helper()
	ns := env.Namespace(t)
	kubeconfig := istiodKubeconfig(t, env, ns)
	grantIstiodRBAC(t, env, ns)
	p := newIstiod(t, "istiod", ns, kubeconfig)
	p.run(t)
	waitFor(t, "istiod ready", 90*time.Second, p.ready)
	return p
}

// createPod creates a pod and, as a kubelet would, gives it ip.
func createPod(t *testing.T, client kubernetes.Interface, ns, name, sa, ip string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			Containers:         []corev1.Container{{Name: "app", Image: "example.invalid/app"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	if pod, err = client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
	return pod
}

func podEndpoint(pod *corev1.Pod) discoveryv1.Endpoint {
	ready := true
	return discoveryv1.Endpoint{
		Addresses:  []string{pod.Status.PodIP},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
}

// addresses are the "ip:port" of every endpoint of cla.
func addresses(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	slices.Sort(out)
	return out
}

// TestIstiodServesKubernetes runs one istiod in Kubernetes mode with the
// chart's RBAC and its mesh model from the API server, and proxies of it.
// Not parallel: every istiod publishes its root into every namespace, so
// istiods of parallel tests with other CAs would keep rewriting each
// other's ConfigMaps.
func TestIstiodServesKubernetes(t *testing.T) {
	env := testenv.Get(t)
	p := startIstiod(t, env)
	t.Cleanup(func() { p.checkNeverRefused(t) }) // before istiod stops
	t.Run("a Service, its pods and EndpointSlice reach a proxy, and a change is pushed", func(t *testing.T) {
		t.Parallel()
		checkModel(t, env, p)
	})
	t.Run("a gateway gets the credentialName Secrets it may get, and their updates", func(t *testing.T) {
		t.Parallel()
		checkCredentialNames(t, env, p)
	})
}

// checkModel: a Service, its Pods and EndpointSlice created on the API
// server reach an authenticated proxy as its cluster and endpoints, and a
// change of the EndpointSlice is pushed.
func checkModel(t *testing.T, env *testenv.Env, p *istiod) {
	app := env.Namespace(t)
	client := env.Client(t)
	ctx := context.Background()
	for _, sa := range []string{"echo", "client"} {
		_ = env.ServiceAccountToken(t, app, sa, nil, nil) // creates the account
	}

	labels := map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"}
	if _, err := client.CoreV1().Services(app).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9000)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod1 := createPod(t, client, app, "echo-1", "echo", "10.20.0.1", labels)
	port, name := int32(9000), "grpc"
	slice, err := client.DiscoveryV1().EndpointSlices(app).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-x1", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{podEndpoint(pod1)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	roots := p.roots(t, env)
	ads := p.dialADS(t, roots, p.workloadCert(t, env, roots, app, "client"), app, "client")
	clusterName := "outbound|8080||echo." + app + ".svc.cluster.local"
	ads.subscribe(typeCluster, clusterName)
	await(ads, "the Service's cluster", typeCluster, func(cs []*cluster.Cluster) bool {
		return len(cs) == 1 && cs[0].GetName() == clusterName
	})
	ads.subscribe(typeEndpoint, clusterName)
	await(ads, "the pod's endpoint", typeEndpoint, func(cs []*endpoint.ClusterLoadAssignment) bool {
		return len(cs) == 1 && slices.Equal(addresses(cs[0]), []string{"10.20.0.1:9000"})
	})

	pod2 := createPod(t, client, app, "echo-2", "echo", "10.20.0.2", labels)
	slice.Endpoints = append(slice.Endpoints, podEndpoint(pod2))
	if _, err := client.DiscoveryV1().EndpointSlices(app).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(ads, "the second pod's endpoint, pushed", typeEndpoint, func(cs []*endpoint.ClusterLoadAssignment) bool {
		return len(cs) == 1 && slices.Equal(addresses(cs[0]), []string{"10.20.0.1:9000", "10.20.0.2:9000"})
	})
}

// tlsSecret is a kubernetes.io/tls Secret holding c.
func tlsSecret(name string, c *catest.Cert) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: c.CertPEM, corev1.TLSPrivateKeyKey: c.KeyPEM},
	}
}

// grantGet lets sa (of saNS) get the Secret secret of ns, by a Role.
func grantGet(t *testing.T, client kubernetes.Interface, ns, secret, saNS, sa string) {
	t.Helper()
	ctx := context.Background()
	name := "get-" + secret
	if _, err := client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{secret}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNS, Name: sa}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkCredentialNames: a gateway gets, over SDS, the TLS Secret of its
// namespace that its service account may get, and an update of it; Secrets
// of another namespace, or that it may not get, are left out.
func checkCredentialNames(t *testing.T, env *testenv.Env, p *istiod) {
	a, b := env.Namespace(t), env.Namespace(t)
	client := env.Client(t)
	ctx := context.Background()
	_ = env.ServiceAccountToken(t, a, "gw", nil, nil) // creates the account

	root := catest.NewRoot(t)
	newLeaf := func() *catest.Cert {
		return catest.NewIntermediate(t, root, catest.WithoutCA(), catest.WithCommonName("gw.example.com"))
	}
	first := newLeaf()
	for ns, secret := range map[string]string{a: "gw-cert", b: "other-cert"} {
		if _, err := client.CoreV1().Secrets(ns).Create(ctx, tlsSecret(secret, first), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Also in b: the other namespace is refused by namespace, not
		// only by RBAC.
		grantGet(t, client, ns, secret, a, "gw")
	}
	if _, err := client.CoreV1().Secrets(a).Create(ctx, tlsSecret("not-granted", first), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	roots := p.roots(t, env)
	ads := p.dialADS(t, roots, p.workloadCert(t, env, roots, a, "gw"), a, "gw")
	ads.subscribe(typeSecret, "kubernetes://gw-cert", "kubernetes://"+b+"/other-cert", "kubernetes://not-granted")
	served := func(want *catest.Cert) func([]*tlsv3.Secret) bool {
		return func(ss []*tlsv3.Secret) bool {
			for _, s := range ss {
				if s.GetName() != "kubernetes://gw-cert" {
					t.Errorf("served %s to gw of %s", s.GetName(), a)
				}
			}
			return len(ss) == 1 && ss[0].GetName() == "kubernetes://gw-cert" &&
				bytes.Equal(ss[0].GetTlsCertificate().GetCertificateChain().GetInlineBytes(), want.CertPEM)
		}
	}
	got := await(ads, "the gateway's own secret, and only it", typeSecret, served(first))
	if !bytes.Equal(got[0].GetTlsCertificate().GetPrivateKey().GetInlineBytes(), first.KeyPEM) {
		t.Error("the served key is not the Secret's")
	}

	second := newLeaf()
	secret, err := client.CoreV1().Secrets(a).Get(ctx, "gw-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data = tlsSecret("gw-cert", second).Data
	if _, err := client.CoreV1().Secrets(a).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(ads, "the updated secret, pushed", typeSecret, served(second))
}
