package kubesource

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	securityv1 "istio.io/api/security/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// cluster is a test's view of the shared apiserver with the Istio CRDs.
type cluster struct {
	ns    string
	kube  kubernetes.Interface
	istio versioned.Interface
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	env := testenv.Get(t)
	crds, err := filepath.Glob("../../../charts/istiod/crds/*.yaml")
	if err != nil || len(crds) != 4 {
		t.Fatalf("Istio CRDs of the chart: %v %v", crds, err)
	}
	env.InstallCRDs(t, crds...)
	istio, err := versioned.NewForConfig(rest.CopyConfig(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{ns: env.Namespace(t), kube: env.Client(t), istio: istio}
}

func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// pod creates a pod and, as a kubelet would, gives it ip.
func (c *cluster) pod(t *testing.T, name, sa, ip string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if sa != "default" {
		_, err := c.kube.CoreV1().ServiceAccounts(c.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			check(t, "create service account", err)
		}
	}
	p := newPod(c.ns, name, sa, "", labels)
	p.UID, p.ResourceVersion, p.Status = "", "", corev1.PodStatus{}
	p, err := c.kube.CoreV1().Pods(c.ns).Create(ctx, p, metav1.CreateOptions{})
	check(t, "create pod", err)
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	p, err = c.kube.CoreV1().Pods(c.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	check(t, "set pod IP", err)
	return p
}

func (c *cluster) create(t *testing.T, obj any) {
	t.Helper()
	ctx, opts := context.Background(), metav1.CreateOptions{}
	if m, ok := obj.(metav1.Object); ok {
		m.SetNamespace(c.ns)
		m.SetResourceVersion("")
	}
	var err error
	switch o := obj.(type) {
	case *corev1.Service:
		_, err = c.kube.CoreV1().Services(c.ns).Create(ctx, o, opts)
	case *discoveryv1.EndpointSlice:
		_, err = c.kube.DiscoveryV1().EndpointSlices(c.ns).Create(ctx, o, opts)
	case *istiosecurity.PeerAuthentication:
		_, err = c.istio.SecurityV1().PeerAuthentications(c.ns).Create(ctx, o, opts)
	case *istiosecurity.AuthorizationPolicy:
		_, err = c.istio.SecurityV1().AuthorizationPolicies(c.ns).Create(ctx, o, opts)
	case *istiosecurity.RequestAuthentication:
		_, err = c.istio.SecurityV1().RequestAuthentications(c.ns).Create(ctx, o, opts)
	case *istionetworking.DestinationRule:
		_, err = c.istio.NetworkingV1().DestinationRules(c.ns).Create(ctx, o, opts)
	default:
		t.Fatalf("cannot create %T", obj)
	}
	check(t, "create", err)
}

// buildLog records what every rebuild of a source saw.
type buildLog struct {
	mu     sync.Mutex
	ns     string
	builds []build1
}

type build1 struct {
	echoVersion string // echo's resourceVersion in the cache
	published   bool
}

func (b *buildLog) record(l listers, published bool) {
	var rv string
	if svc, err := l.services.Services(b.ns).Get("echo"); err == nil {
		rv = svc.ResourceVersion
	}
	b.mu.Lock()
	b.builds = append(b.builds, build1{echoVersion: rv, published: published})
	b.mu.Unlock()
}

// waitForEcho waits for a rebuild that saw echo at resourceVersion rv.
func (b *buildLog) waitForEcho(t *testing.T, rv string) build1 {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		for _, x := range b.builds {
			if x.echoVersion == rv {
				b.mu.Unlock()
				return x
			}
		}
		b.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no rebuild saw echo at resourceVersion %s", rv)
	return build1{}
}

func TestSourceAgainstAPIServer(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	host := "echo." + c.ns + ".svc.cluster.local"
	store := &recorder{Store: model.NewStore()}
	log := &buildLog{ns: c.ns}
	src, err := New(Config{Client: c.kube, Istio: c.istio, Publisher: store, Logger: testLogger(t)})
	check(t, "New", err)
	src.afterBuild = log.record
	if src.HasSynced() {
		t.Fatal("HasSynced before Run")
	}
	runSource(t, src)
	for deadline := time.Now().Add(waitTimeout); !src.HasSynced(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never synced")
		}
	}
	if store.Current().Version == "" || len(store.published()) != 1 {
		t.Fatalf("synced, yet published %v", store.published())
	}

	echo := newService(c.ns, "echo", map[string]string{"app": "echo"},
		servicePort("grpc", 8080, intstr.FromInt32(9000)), servicePort("http", 80, intstr.FromString("web")))
	echo.Spec.Ports[0].AppProtocol = ptr.To("grpc")
	c.create(t, echo)
	headless := newService(c.ns, "headless", nil, servicePort("tcp", 5000, intstr.FromInt32(5000)))
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	c.create(t, headless)
	c.pod(t, "echo-1", "echo", "10.1.0.1", map[string]string{"app": "echo", model.TLSModeLabel: "istio"})
	c.pod(t, "echo-2", "default", "10.1.0.2", map[string]string{"app": "echo", "istio-locality": "eu.eu-1a"})
	ready := podEndpoint(c.ns, "echo-1", "10.1.0.1")
	ready.Zone = ptr.To("zone-a")
	notReady := podEndpoint(c.ns, "echo-1", "10.1.0.3")
	notReady.Conditions.Ready = ptr.To(false)
	terminating := podEndpoint(c.ns, "echo-2", "10.1.0.4")
	terminating.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}
	noPod := podEndpoint(c.ns, "", "10.1.0.6")
	noPod.TargetRef = nil
	slice := newSlice(c.ns, "echo-a", "echo", map[string]int32{"grpc": 9000, "http": 8081},
		ready, podEndpoint(c.ns, "echo-2", "10.1.0.2"), notReady, terminating,
		podEndpoint(c.ns, "echo-3", "10.1.0.5"), noPod)
	slice.Endpoints[1].Conditions = discoveryv1.EndpointConditions{}
	c.create(t, slice)

	t.Run("endpoints come from the slice and the pods it names", func(t *testing.T) {
		snap := waitFor(t, store.Store, "echo's endpoints", func(s *model.Snapshot) bool {
			return s.Service(host) != nil && len(s.Service(host).Endpoints[8080]) == 3
		})
		eps := snap.Service(host).Endpoints[8080]
		want := []model.Endpoint{
			{Address: "10.1.0.1", Port: 9000, Locality: "/zone-a", ServiceAccount: "echo", Namespace: c.ns, Weight: 1},
			{Address: "10.1.0.2", Port: 9000, Locality: "eu/eu-1a", ServiceAccount: "default", Namespace: c.ns, Weight: 1},
			{Address: "10.1.0.6", Port: 9000, Namespace: c.ns, Weight: 1},
		}
		for i, w := range want {
			if !sameButLabels(eps[i], w) {
				t.Errorf("endpoint %d: %+v, want %+v", i, eps[i], w)
			}
		}
		if eps[0].TLSMode() != "istio" || eps[1].Labels["app"] != "echo" || eps[2].Labels != nil {
			t.Errorf("labels %v, %v, %v", eps[0].Labels, eps[1].Labels, eps[2].Labels)
		}
		if http := snap.Service(host).Endpoints[80]; len(http) != 3 || http[0].Port != 8081 {
			t.Errorf("endpoints of the named target port %+v", http)
		}
		if p := snap.Service(host).Ports[0]; p.Protocol != "grpc" || p.TargetPort != 9000 {
			t.Errorf("port %+v", p)
		}
		if h := snap.Service("headless." + c.ns + ".svc.cluster.local"); h == nil || len(h.Endpoints[5000]) != 0 {
			t.Errorf("headless service without slices: %+v", h)
		}
	})

	t.Run("a pod that arrives after its slice adds its endpoint", func(t *testing.T) {
		c.pod(t, "echo-3", "echo", "10.1.0.5", map[string]string{"app": "echo"})
		waitFor(t, store.Store, "echo-3's endpoint", func(s *model.Snapshot) bool {
			return len(s.Service(host).Endpoints[8080]) == 4
		})
	})

	t.Run("a relabelled pod changes its endpoint", func(t *testing.T) {
		p, err := c.kube.CoreV1().Pods(c.ns).Get(ctx, "echo-1", metav1.GetOptions{})
		check(t, "get pod", err)
		delete(p.Labels, model.TLSModeLabel)
		_, err = c.kube.CoreV1().Pods(c.ns).Update(ctx, p, metav1.UpdateOptions{})
		check(t, "update pod", err)
		waitFor(t, store.Store, "echo-1 without tlsMode", func(s *model.Snapshot) bool {
			eps := s.Service(host).Endpoints[8080]
			return len(eps) > 0 && eps[0].Address == "10.1.0.1" && eps[0].TLSMode() == ""
		})
	})

	t.Run("policies are in the model", func(t *testing.T) {
		pa := newPeerAuthentication(c.ns, "strict")
		pa.Spec.Mtls = &securityv1.PeerAuthentication_MutualTLS{Mode: securityv1.PeerAuthentication_MutualTLS_STRICT}
		c.create(t, pa)
		ap := &istiosecurity.AuthorizationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-echo"}}
		ap.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}}
		ap.Spec.Action = securityv1.AuthorizationPolicy_ALLOW
		c.create(t, ap)
		ra := &istiosecurity.RequestAuthentication{ObjectMeta: metav1.ObjectMeta{Name: "jwt"}}
		ra.Spec.JwtRules = []*securityv1.JWTRule{{Issuer: "https://issuer.example"}}
		c.create(t, ra)
		dr := newDestinationRule(c.ns, "echo", "echo")
		dr.Spec.TrafficPolicy = &networkingv1.TrafficPolicy{Tls: &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_ISTIO_MUTUAL}}
		c.create(t, dr)
		snap := waitFor(t, store.Store, "the four policies", func(s *model.Snapshot) bool {
			return s.DestinationRule(host, c.ns) != nil && len(s.AuthorizationPolicies(c.ns, map[string]string{"app": "echo"})) == 1 &&
				s.MTLSMode(c.ns, nil, 9000) == model.MTLSStrict && len(s.Resources().RequestAuthentications) > 0
		})
		if got := snap.DestinationRule(host, c.ns).Spec.GetTrafficPolicy().GetTls().GetMode(); got != networkingv1.ClientTLSSettings_ISTIO_MUTUAL {
			t.Errorf("DestinationRule TLS mode %s", got)
		}
	})

	t.Run("a change the model does not read publishes no new version", func(t *testing.T) {
		before := store.Current().Version
		published := len(store.published())
		svc, err := c.kube.CoreV1().Services(c.ns).Get(ctx, "echo", metav1.GetOptions{})
		check(t, "get service", err)
		svc.Annotations = map[string]string{"note": "unread"}
		svc, err = c.kube.CoreV1().Services(c.ns).Update(ctx, svc, metav1.UpdateOptions{})
		check(t, "annotate service", err)
		if b := log.waitForEcho(t, svc.ResourceVersion); b.published {
			t.Error("the rebuild after an annotation published")
		}
		if store.Current().Version != before || len(store.published()) != published {
			t.Errorf("version %s → %s, %d → %d publications", before, store.Current().Version, published, len(store.published()))
		}
	})

	t.Run("deletes are reflected", func(t *testing.T) {
		check(t, "delete slice", c.kube.DiscoveryV1().EndpointSlices(c.ns).Delete(ctx, "echo-a", metav1.DeleteOptions{}))
		check(t, "delete rule", c.istio.NetworkingV1().DestinationRules(c.ns).Delete(ctx, "echo", metav1.DeleteOptions{}))
		waitFor(t, store.Store, "echo without endpoints nor rule", func(s *model.Snapshot) bool {
			return len(s.Service(host).Endpoints[8080]) == 0 && s.DestinationRule(host, c.ns) == nil
		})
	})

	if err := src.Run(ctx); err == nil {
		t.Error("a second Run was accepted")
	}
}

func sameButLabels(a, b model.Endpoint) bool {
	a.Labels, b.Labels = nil, nil
	return reflect.DeepEqual(a, b)
}
