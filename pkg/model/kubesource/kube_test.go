package kubesource

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported/unsupportedtest"
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
	// The chart does not install Gateway, VirtualService and ServiceEntry:
	// a cluster has Istio's CRDs of them, here open ones as the reporter's
	// tests install.
	var routing strings.Builder
	for _, name := range []string{"Gateway", "VirtualService", "ServiceEntry", "Sidecar"} {
		k, ok := policy.Lookup("networking.istio.io", name)
		if !ok {
			t.Fatalf("no kind %s", name)
		}
		routing.WriteString(unsupportedtest.CRD(k, "v1"))
	}
	env.InstallCRDs(t, append(crds, unsupportedtest.WriteFile(t, routing.String()))...)
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
	return c.podOn(t, name, sa, ip, "", labels)
}

// podOn creates a pod bound to node, as a scheduler would, and gives it ip.
func (c *cluster) podOn(t *testing.T, name, sa, ip, node string, labels map[string]string) *corev1.Pod {
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
	p.Spec.NodeName = node
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
	case *istionetworking.Gateway:
		_, err = c.istio.NetworkingV1().Gateways(c.ns).Create(ctx, o, opts)
	case *istionetworking.VirtualService:
		_, err = c.istio.NetworkingV1().VirtualServices(c.ns).Create(ctx, o, opts)
	case *istionetworking.ServiceEntry:
		_, err = c.istio.NetworkingV1().ServiceEntries(c.ns).Create(ctx, o, opts)
	case *istionetworking.Sidecar:
		_, err = c.istio.NetworkingV1().Sidecars(c.ns).Create(ctx, o, opts)
	default:
		t.Fatalf("cannot create %T", obj)
	}
	check(t, "create", err)
}

// buildLog records what every rebuild of a source saw.
type buildLog struct {
	mu     sync.Mutex
	ns     string
	nodes  []string // the nodes whose resourceVersions to record
	builds []build1
}

type build1 struct {
	echoVersion  string            // echo's resourceVersion in the cache
	nodeVersions map[string]string // the resourceVersions of buildLog.nodes
	published    bool
}

func (b *buildLog) record(l listers, published bool) {
	x := build1{nodeVersions: map[string]string{}, published: published}
	if svc, err := l.services.Services(b.ns).Get("echo"); err == nil {
		x.echoVersion = svc.ResourceVersion
	}
	for _, name := range b.nodes {
		if n, err := l.nodes.Get(name); err == nil {
			x.nodeVersions[name] = n.ResourceVersion
		}
	}
	b.mu.Lock()
	b.builds = append(b.builds, x)
	b.mu.Unlock()
}

// all returns the rebuilds so far.
func (b *buildLog) all() []build1 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]build1(nil), b.builds...)
}

// waitForBuild waits for a rebuild that satisfies cond.
func (b *buildLog) waitForBuild(t *testing.T, what string, cond func(build1) bool) build1 {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, x := range b.all() {
			if cond(x) {
				return x
			}
		}
	}
	t.Fatalf("no rebuild saw %s", what)
	return build1{}
}

// waitForEcho waits for a rebuild that saw echo at resourceVersion rv.
func (b *buildLog) waitForEcho(t *testing.T, rv string) build1 {
	t.Helper()
	return b.waitForBuild(t, "echo at resourceVersion "+rv, func(x build1) bool { return x.echoVersion == rv })
}

// settle waits until the source has not rebuilt for a while, so that no
// rebuild asked for earlier is still to come.
func (b *buildLog) settle(t *testing.T) {
	t.Helper()
	const quiet = 200 * time.Millisecond
	n := len(b.all())
	for deadline := time.Now().Add(waitTimeout); ; {
		time.Sleep(quiet)
		if m := len(b.all()); m == n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the source kept rebuilding: %d rebuilds", m)
		} else {
			n = m
		}
	}
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
			return s.DestinationRuleFor(host, c.ns, nil) != nil && len(s.AuthorizationPolicies(c.ns, map[string]string{"app": "echo"})) == 1 &&
				s.MTLSMode(c.ns, nil, 9000) == model.MTLSStrict && len(s.Resources().RequestAuthentications) > 0
		})
		if got := snap.DestinationRuleFor(host, c.ns, nil).Spec.GetTrafficPolicy().GetTls().GetMode(); got != networkingv1.ClientTLSSettings_ISTIO_MUTUAL {
			t.Errorf("DestinationRule TLS mode %s", got)
		}
	})

	t.Run("gateways and virtual services are in the model", func(t *testing.T) {
		c.create(t, newGateway(c.ns, "ingress", "ingressgateway", "*/echo.example.com", 0))
		c.create(t, newVirtualService(c.ns, "echo", "echo.example.com", "ingress", "echo"))
		gw, err := c.istio.NetworkingV1().Gateways(c.ns).Get(ctx, "ingress", metav1.GetOptions{})
		check(t, "get gateway", err)
		ingress := map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}
		snap := waitFor(t, store.Store, "the Gateway and the VirtualService", func(s *model.Snapshot) bool {
			return len(s.GatewaysFor(c.ns, ingress, true)) == 1 && len(s.VirtualServices()) > 0
		})
		got := snap.GatewaysFor(c.ns, ingress, true)[0]
		if !got.Created.Equal(gw.CreationTimestamp.Time) || got.Created.IsZero() || got.Spec.GetServers()[0].GetHosts()[0] != "*/echo.example.com" {
			t.Errorf("gateway %+v created %v, want %v", got.Spec, got.Created, gw.CreationTimestamp)
		}
		if len(snap.GatewaysFor(c.ns, map[string]string{"istio": "egressgateway"}, true)) != 0 {
			t.Error("the ingress Gateway selects an egress pod")
		}

		vs, err := c.istio.NetworkingV1().VirtualServices(c.ns).Get(ctx, "echo", metav1.GetOptions{})
		check(t, "get virtual service", err)
		vs.Spec.Http[0].Route[0].Destination.Host = "other"
		_, err = c.istio.NetworkingV1().VirtualServices(c.ns).Update(ctx, vs, metav1.UpdateOptions{})
		check(t, "update virtual service", err)
		after := waitFor(t, store.Store, "the changed route", func(s *model.Snapshot) bool {
			for _, v := range s.VirtualServices() {
				if v.Namespace == c.ns && v.Name == "echo" {
					return v.Spec.GetHttp()[0].GetRoute()[0].GetDestination().GetHost() == "other"
				}
			}
			return false
		})
		if d := model.Diff(snap, after); len(d.VirtualServices) != 2 || d.VirtualServices[0].Name != "echo" {
			t.Errorf("the route change is not told as the VirtualService's, before and after: %+v", d)
		}

		check(t, "delete gateway", c.istio.NetworkingV1().Gateways(c.ns).Delete(ctx, "ingress", metav1.DeleteOptions{}))
		check(t, "delete virtual service", c.istio.NetworkingV1().VirtualServices(c.ns).Delete(ctx, "echo", metav1.DeleteOptions{}))
		waitFor(t, store.Store, "no Gateway nor VirtualService", func(s *model.Snapshot) bool {
			return len(s.GatewaysFor(c.ns, ingress, true)) == 0 && len(s.VirtualServices()) == 0
		})
	})

	t.Run("service entries are services of the model", func(t *testing.T) {
		c.create(t, newServiceEntry(c.ns, "api", "api.example.com", networkingv1.ServiceEntry_STATIC, "", 0, "10.9.0.1"))
		snap := waitFor(t, store.Store, "the ServiceEntry's host", func(s *model.Snapshot) bool {
			return s.Service("api.example.com") != nil
		})
		svc := snap.Service("api.example.com")
		if svc.Entry == nil || svc.Namespace != c.ns || len(svc.Endpoints[80]) != 1 || svc.Endpoints[80][0].Address != "10.9.0.1" {
			t.Errorf("api.example.com: %+v", svc)
		}
		check(t, "delete service entry", c.istio.NetworkingV1().ServiceEntries(c.ns).Delete(ctx, "api", metav1.DeleteOptions{}))
		waitFor(t, store.Store, "no ServiceEntry host", func(s *model.Snapshot) bool { return s.Service("api.example.com") == nil })
	})

	t.Run("sidecars are read with their creation times", func(t *testing.T) {
		c.create(t, newSidecar(c.ns, "scoped", "", 100, "./*", "istio-system/*"))
		snap := waitFor(t, store.Store, "the Sidecar", func(s *model.Snapshot) bool { return len(s.Sidecars()) == 1 })
		sc := snap.SidecarFor(c.ns, nil)
		if sc == nil || sc.Name != "scoped" || sc.Created.IsZero() || len(sc.Spec.GetEgress()) != 1 {
			t.Fatalf("Sidecar of %s: %+v", c.ns, sc)
		}
		check(t, "delete sidecar", c.istio.NetworkingV1().Sidecars(c.ns).Delete(ctx, "scoped", metav1.DeleteOptions{}))
		waitFor(t, store.Store, "no Sidecar", func(s *model.Snapshot) bool { return len(s.Sidecars()) == 0 })
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
			return len(s.Service(host).Endpoints[8080]) == 0 && s.DestinationRuleFor(host, c.ns, nil) == nil
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

// node creates a node with labels, deleted when the test ends. Nodes are
// cluster-wide: its name starts with the test's namespace.
func (c *cluster) node(t *testing.T, suffix string, labels map[string]string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	n, err := c.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.ns + "-" + suffix, Labels: labels}}, metav1.CreateOptions{})
	check(t, "create node", err)
	t.Cleanup(func() { _ = c.kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}) })
	return n
}

func TestNodeLocalityAgainstAPIServer(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	host := "echo." + c.ns + ".svc.cluster.local"
	// canary is a node no endpoint is on: its changes, ordered after the
	// node's in the same watch, show when the source has seen the node's.
	canary := c.node(t, "canary", placed("r", "z", "c1"))
	node := c.node(t, "a", placed("r", "z", "s"))
	c.create(t, newService(c.ns, "echo", map[string]string{"app": "echo"}, servicePort("grpc", 8080, intstr.FromInt32(9000))))
	c.podOn(t, "echo-1", "default", "10.2.0.1", node.Name, map[string]string{"app": "echo"})
	ep := podEndpoint(c.ns, "echo-1", "10.2.0.1")
	ep.Zone = ptr.To("slice-zone")
	c.create(t, newSlice(c.ns, "echo-a", "echo", map[string]int32{"grpc": 9000}, ep))

	store := &recorder{Store: model.NewStore()}
	log := &buildLog{ns: c.ns, nodes: []string{node.Name, canary.Name}}
	// A short delay rebuilds after each event rather than after a batch, so
	// a rebuild for the heartbeat alone would show.
	src, err := New(Config{Client: c.kube, Istio: c.istio, Publisher: store, Logger: testLogger(t), Delay: time.Millisecond})
	check(t, "New", err)
	src.afterBuild = log.record
	runSource(t, src)
	locality := func(s *model.Snapshot) string {
		if svc := s.Service(host); svc != nil && len(svc.Endpoints[8080]) == 1 {
			return svc.Endpoints[8080][0].Locality
		}
		return ""
	}

	// labels are echo-1's endpoint's topology labels, as Istio adds them.
	labels := func(s *model.Snapshot) string {
		if svc := s.Service(host); svc != nil && len(svc.Endpoints[8080]) == 1 {
			l := svc.Endpoints[8080][0].Labels
			return l[corev1.LabelTopologyRegion] + "/" + l[corev1.LabelTopologyZone] + "/" + l[model.SubzoneLabel] + " " + l[corev1.LabelHostname]
		}
		return ""
	}

	t.Run("the pod's node places its endpoint", func(t *testing.T) {
		waitFor(t, store.Store, "echo-1 in r/z/s", func(s *model.Snapshot) bool { return locality(s) == "r/z/s" })
		if got, want := labels(store.Current()), "r/z/s "+node.Name; got != want {
			t.Errorf("echo-1's topology labels %q, want %q", got, want)
		}
	})

	t.Run("a node status heartbeat rebuilds and publishes nothing", func(t *testing.T) {
		log.settle(t)
		before, published, builds := store.Current().Version, len(store.published()), len(log.all())
		n, err := c.kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		check(t, "get node", err)
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Reason: "KubeletReady",
		}}
		n, err = c.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		check(t, "heartbeat", err)
		cn, err := c.kube.CoreV1().Nodes().Get(ctx, canary.Name, metav1.GetOptions{})
		check(t, "get canary", err)
		cn.Labels[model.SubzoneLabel] = "c2"
		cn, err = c.kube.CoreV1().Nodes().Update(ctx, cn, metav1.UpdateOptions{})
		check(t, "relabel canary", err)
		log.waitForBuild(t, "the relabelled canary", func(x build1) bool { return x.nodeVersions[canary.Name] == cn.ResourceVersion })
		for _, x := range log.all()[builds:] {
			if x.nodeVersions[node.Name] == n.ResourceVersion && x.nodeVersions[canary.Name] != cn.ResourceVersion {
				t.Error("the heartbeat alone caused a rebuild")
				break
			}
		}
		if store.Current().Version != before || len(store.published()) != published {
			t.Errorf("version %s → %s, %d → %d publications", before, store.Current().Version, published, len(store.published()))
		}
	})

	t.Run("a zone label change publishes the new locality", func(t *testing.T) {
		published := len(store.published())
		n, err := c.kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		check(t, "get node", err)
		n.Labels[corev1.LabelTopologyZone] = "z2"
		_, err = c.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		check(t, "relabel node", err)
		waitFor(t, store.Store, "echo-1 in r/z2/s", func(s *model.Snapshot) bool { return locality(s) == "r/z2/s" })
		if got, want := labels(store.Current()), "r/z2/s "+node.Name; got != want {
			t.Errorf("after the relabel, echo-1's topology labels %q, want %q", got, want)
		}
		if len(store.published()) <= published {
			t.Error("the new locality was not published")
		}
	})

	t.Run("a deleted node leaves the endpoint's zone", func(t *testing.T) {
		check(t, "delete node", c.kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}))
		waitFor(t, store.Store, "echo-1 in /slice-zone", func(s *model.Snapshot) bool { return locality(s) == "/slice-zone" })
		// Istio labels by the pod's node alone, not the slice's zone.
		if got, want := labels(store.Current()), "// "+node.Name; got != want {
			t.Errorf("with its node gone, echo-1's topology labels %q, want %q", got, want)
		}
	})
}
