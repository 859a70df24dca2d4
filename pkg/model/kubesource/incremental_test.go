package kubesource

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
	securityv1beta1 "istio.io/api/security/v1beta1"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestIncrementalRebuildsAreFreshBuilds makes random changes to pods,
// EndpointSlices, Services, nodes and Istio objects (Gateways and
// VirtualServices and ServiceEntries among them), delivered through the informers'
// handler as a running Source gets them, and checks after each few that
// the rebuild that reuses what the events did not touch gives the
// snapshot a build from scratch gives.
func TestIncrementalRebuildsAreFreshBuilds(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := newChurnCluster(t, seed)
			var r reuse
			buildReusing(c.l, model.Options{}, &r, &touched{})
			reused, routed, entries, scoped := 0, 0, 0, 0
			for step := range 300 {
				for range 1 + c.rng.IntN(3) {
					c.mutate()
				}
				events := c.events
				c.events = &touched{}
				before := map[*serviceEntry]bool{}
				for _, e := range r.services.items {
					before[e] = true
				}
				got := buildReusing(c.l, model.Options{}, &r, events)
				want := build(c.l, model.Options{})
				if got.Version != want.Version || !reflect.DeepEqual(got.Services(), want.Services()) ||
					!reflect.DeepEqual(got.Resources(), want.Resources()) {
					t.Fatalf("step %d (%s): the rebuild differs from a fresh build:\n got %s %s\nwant %s %s",
						step, c.last, got.Version, describe(got), want.Version, describe(want))
				}
				for _, e := range r.services.items {
					if before[e] {
						reused++
					}
				}
				if res := got.Resources(); len(res.Gateways) > 0 && len(res.VirtualServices) > 0 {
					routed++
				}
				if len(got.Sidecars()) > 0 {
					scoped++
				}
				if slices.ContainsFunc(got.Services(), func(s *model.Service) bool { return s.Entry != nil && len(s.Endpoints[80]) > 0 }) {
					entries++
				}
			}
			if routed == 0 {
				t.Fatal("no snapshot had both Gateways and VirtualServices: the test checks nothing of them")
			}
			if scoped == 0 {
				t.Fatal("no snapshot had a Sidecar: the test checks nothing of them")
			}
			if entries == 0 {
				t.Fatal("no snapshot had a ServiceEntry with endpoints: the test checks nothing of them")
			}
			if reused == 0 {
				t.Fatal("no service was ever reused: the test checks nothing incremental")
			}
		})
	}
}

// TestAGatewayChangeRebuildsOnlyItsKind: an event naming one Gateway (or
// VirtualService) makes that object again and nothing else; every other
// object, and the other kinds' lists, are the last snapshot's.
func TestAGatewayChangeRebuildsOnlyItsKind(t *testing.T) {
	gws := []any{newGateway("a", "gw0", "ingress", "h0.example.com", 1), newGateway("a", "gw1", "", "h1.example.com", 2),
		newGateway("b", "gw0", "egress", "h2.example.com", 3)}
	vss := []any{newVirtualService("a", "vs0", "h0.example.com", "gw0", "s0"), newVirtualService("b", "vs1", "h2.example.com", "b/gw0", "s1")}
	objs := append(append([]any{newDestinationRule("a", "dr", "s0"), newPeerAuthentication("a", "pa")}, gws...), vss...)
	l, idx := cacheIndexers(t, objs...)
	var r reuse
	first := buildReusing(l, model.Options{}, &r, &touched{})
	old := *first.Resources()
	if len(old.Gateways) != 3 || len(old.VirtualServices) != 2 || old.Gateways[0].Created.Unix() != 1 {
		t.Fatalf("first build: %d gateways, %d virtual services", len(old.Gateways), len(old.VirtualServices))
	}

	changed := newGateway("a", "gw1", "", "h1.example.org", 2)
	changed.ResourceVersion = "2"
	if err := idx["gw"].Update(changed); err != nil {
		t.Fatal(err)
	}
	events := &touched{}
	events.add(changed)
	next := buildReusing(l, model.Options{}, &r, events)
	res := next.Resources()
	if next.Version == first.Version || res.Gateways[1].Spec.GetServers()[0].GetHosts()[0] != "h1.example.org" {
		t.Fatalf("the change is not in the rebuild: version %s, hosts %v", next.Version, res.Gateways[1].Spec.GetServers()[0].GetHosts())
	}
	if res.Gateways[0] != old.Gateways[0] || res.Gateways[2] != old.Gateways[2] || res.Gateways[1] == old.Gateways[1] {
		t.Error("the Gateways the event did not name were made again, or the one it named was not")
	}
	if &res.VirtualServices[0] != &old.VirtualServices[0] || &res.DestinationRules[0] != &old.DestinationRules[0] ||
		&res.PeerAuthentications[0] != &old.PeerAuthentications[0] {
		t.Error("a kind the event did not touch was rebuilt")
	}
	if want := build(l, model.Options{}); want.Version != next.Version || !reflect.DeepEqual(want.Resources(), res) {
		t.Error("the rebuild differs from a fresh build")
	}
	// After the comparison: proto.Equal initialises the specs' internal
	// state, which reflect.DeepEqual would see.
	if c := model.Diff(first, next); !c.Config {
		t.Errorf("the Gateway change is not a config change: %+v", c)
	}
}

func describe(s *model.Snapshot) string {
	out := ""
	for _, svc := range s.Services() {
		out += fmt.Sprintf("\n  %s %v %v", svc.Hostname, svc.Ports, svc.Endpoints)
	}
	for _, p := range s.Resources().Pods {
		out += fmt.Sprintf("\n  pod %s/%s %v %v locality %q network %q", p.Namespace, p.Name, p.Labels, p.IPs, p.Locality, p.Network)
	}
	return out
}

// churnCluster is a small cluster whose caches change at random, each
// change passed to the informers' handler.
type churnCluster struct {
	t      *testing.T
	rng    *rand.Rand
	l      listers
	idx    map[string]cache.Indexer
	h      handler
	events *touched
	rv     int
	last   string // the last change, for failures
}

var (
	churnNamespaces = []string{"a", "b"}
	churnNodes      = []string{"n0", "n1", "n2"}
)

func newChurnCluster(t *testing.T, seed uint64) *churnCluster {
	c := &churnCluster{t: t, rng: rand.New(rand.NewPCG(seed, seed+1)), events: &touched{}}
	c.l, c.idx = cacheIndexers(t)
	c.h = handler{changed: func(objs ...any) {
		for _, o := range objs {
			c.events.add(o)
		}
	}}
	for _, ns := range churnNamespaces {
		for i := range 4 {
			c.put(c.service(ns, i))
			c.put(c.slice(ns, i, "x"))
		}
		for i := range 10 {
			c.put(c.pod(ns, i))
		}
	}
	for _, n := range churnNodes {
		c.put(c.node(n))
	}
	return c
}

func (c *churnCluster) pick(n int) int { return c.rng.IntN(n) }

func (c *churnCluster) ns() string { return churnNamespaces[c.pick(len(churnNamespaces))] }

// mutate makes one random change.
func (c *churnCluster) mutate() {
	ns := c.ns()
	switch c.pick(16) {
	case 0, 1, 2:
		c.put(c.pod(ns, c.pick(10)))
	case 3:
		c.del("pod", fmt.Sprintf("%s/p%d", ns, c.pick(10)))
	case 4, 5, 6:
		c.put(c.slice(ns, c.pick(4), []string{"x", "y"}[c.pick(2)]))
	case 7:
		c.del("eps", fmt.Sprintf("%s/s%d-%s", ns, c.pick(4), []string{"x", "y"}[c.pick(2)]))
	case 8:
		if c.pick(3) == 0 {
			c.del("svc", fmt.Sprintf("%s/s%d", ns, c.pick(4)))
		} else {
			c.put(c.service(ns, c.pick(4)))
		}
	case 9:
		if n := churnNodes[c.pick(len(churnNodes))]; c.pick(3) == 0 {
			c.del("node", n)
		} else {
			c.put(c.node(n))
		}
	case 10:
		name := fmt.Sprintf("ap%d", c.pick(3))
		if c.pick(3) == 0 {
			c.del("ap", ns+"/"+name)
			return
		}
		ap := &istiosecurity.AuthorizationPolicy{ObjectMeta: objectMeta(ns, name, nil)}
		ap.Spec.Action = securityv1beta1.AuthorizationPolicy_Action(c.pick(3))
		if c.pick(3) == 0 {
			ap.Annotations = map[string]string{dryRunAnnotation: "true"}
		}
		c.put(ap)
	case 11:
		name := fmt.Sprintf("dr%d", c.pick(3))
		if c.pick(3) == 0 {
			c.del("dr", ns+"/"+name)
			return
		}
		c.put(newDestinationRule(ns, name, fmt.Sprintf("s%d", c.pick(4))))
	case 12:
		name := fmt.Sprintf("gw%d", c.pick(3))
		if c.pick(3) == 0 {
			c.del("gw", ns+"/"+name)
			return
		}
		c.put(newGateway(ns, name, []string{"", "ingress", "egress"}[c.pick(3)],
			fmt.Sprintf("h%d.example.com", c.pick(3)), int64(c.pick(3))))
	case 13:
		name := fmt.Sprintf("vs%d", c.pick(3))
		if c.pick(3) == 0 {
			c.del("vs", ns+"/"+name)
			return
		}
		c.put(newVirtualService(ns, name, fmt.Sprintf("h%d.example.com", c.pick(3)),
			fmt.Sprintf("gw%d", c.pick(3)), fmt.Sprintf("s%d", c.pick(4))))
	case 14:
		name := fmt.Sprintf("se%d", c.pick(3))
		if c.pick(3) == 0 {
			c.del("se", ns+"/"+name)
			return
		}
		// Hosts of other entries and of Services too: the oldest entry
		// keeps a host, a Service keeps its own.
		host := []string{"e0.example.com", "e1.example.com", "s0.a.svc.cluster.local"}[c.pick(3)]
		addrs := [][]string{nil, {"10.9.0.1"}, {"10.9.0.1", "10.9.0.2"}}[c.pick(3)]
		c.put(newServiceEntry(ns, name, host, networkingv1.ServiceEntry_Resolution(c.pick(4)),
			fmt.Sprintf("s%d", c.pick(4)), int64(c.pick(3)), addrs...))
	case 15:
		name := fmt.Sprintf("sc%d", c.pick(3))
		if c.pick(3) == 0 {
			c.del("sc", ns+"/"+name)
			return
		}
		app := []string{"", "s0", "s1"}[c.pick(3)]
		c.put(newSidecar(ns, name, app, int64(c.pick(3)), []string{"./*", "*/*", "b/s0.b.svc.cluster.local"}[c.pick(3)]))
	}
}

// put adds or replaces o in its cache, as an informer does.
func (c *churnCluster) put(o any) {
	c.rv++
	o.(metav1.Object).SetResourceVersion(strconv.Itoa(c.rv))
	o, err := transform(o)
	if err != nil {
		c.t.Fatal(err)
	}
	idx := c.idx[kindOf(c.t, o)]
	old, exists, err := idx.Get(o)
	if err != nil {
		c.t.Fatal(err)
	}
	c.last = fmt.Sprintf("put %T %+v", o, o)
	if !exists {
		if err := idx.Add(o); err != nil {
			c.t.Fatal(err)
		}
		c.h.OnAdd(o, false)
		return
	}
	if err := idx.Update(o); err != nil {
		c.t.Fatal(err)
	}
	c.h.OnUpdate(old, o)
}

// del deletes the object of key, sometimes reporting it as a tombstone,
// as an informer does when it missed the deletion.
func (c *churnCluster) del(kind, key string) {
	idx := c.idx[kind]
	old, exists, err := idx.GetByKey(key)
	if err != nil || !exists {
		return
	}
	if err := idx.Delete(old); err != nil {
		c.t.Fatal(err)
	}
	c.last = "delete " + kind + " " + key
	if c.pick(2) == 0 {
		c.h.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
		return
	}
	c.h.OnDelete(old)
}

var churnIPs = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7", ""}

// pod is pod i of ns with random labels, address, node and state; the
// small pool of addresses gives some pods the same one.
func (c *churnCluster) pod(ns string, i int) *corev1.Pod {
	labels := map[string]string{"app": fmt.Sprintf("s%d", c.pick(4)), "version": []string{"v1", "v2"}[c.pick(2)]}
	if c.pick(5) == 0 {
		labels[model.LocalityLabel] = "r.z" + strconv.Itoa(c.pick(2))
	}
	p := newPod(ns, fmt.Sprintf("p%d", i), []string{"", "sa1", "sa2"}[c.pick(3)], churnIPs[c.pick(len(churnIPs))], labels)
	p.UID = types.UID(fmt.Sprintf("uid-%s-%d-%d", ns, i, c.pick(2)))
	p.Spec.NodeName = []string{"", "n0", "n1", "n2", "gone"}[c.pick(5)]
	switch c.pick(8) {
	case 0:
		p.Status.Phase = corev1.PodSucceeded
	case 1:
		p.DeletionTimestamp = &metav1.Time{}
	}
	return p
}

// slice is EndpointSlice s<i>-<suffix> of ns, of service s<i> or now and
// then of another, naming pods of ns by reference (some with a stale UID,
// some of another namespace) or by address alone.
func (c *churnCluster) slice(ns string, i int, suffix string) *discoveryv1.EndpointSlice {
	service := fmt.Sprintf("s%d", i)
	if c.pick(6) == 0 {
		service = fmt.Sprintf("s%d", c.pick(4))
	}
	var eps []discoveryv1.Endpoint
	for range c.pick(5) {
		j := c.pick(10)
		ip := churnIPs[c.pick(len(churnIPs)-1)]
		e := podEndpoint(ns, fmt.Sprintf("p%d", j), ip)
		switch c.pick(6) {
		case 0:
			e.TargetRef = nil // looked up by address
		case 1:
			e.TargetRef.UID = types.UID(fmt.Sprintf("uid-%s-%d-%d", ns, j, c.pick(2)))
		case 2:
			e.TargetRef.Namespace = c.ns()
		case 3:
			e.Conditions.Ready = ptr.To(false)
		case 4:
			e.NodeName = ptr.To(churnNodes[c.pick(len(churnNodes))])
			e.Zone = ptr.To("zz")
		}
		eps = append(eps, e)
	}
	s := newSlice(ns, fmt.Sprintf("s%d-%s", i, suffix), service, map[string]int32{"http": 8080, "grpc": 9090}, eps...)
	s.Labels[discoveryv1.LabelServiceName] = service
	return s
}

// service is Service s<i> of ns with random ports and selector.
func (c *churnCluster) service(ns string, i int) *corev1.Service {
	ports := []corev1.ServicePort{servicePort("http", 80, intstr.FromString("web"))}
	if c.pick(2) == 0 {
		ports = append(ports, servicePort("grpc", 9090, intstr.FromInt32(9090)))
	}
	s := newService(ns, fmt.Sprintf("s%d", i), map[string]string{"app": fmt.Sprintf("s%d", c.pick(4))}, ports...)
	s.Spec.ClusterIP = fmt.Sprintf("10.96.%d.%d", c.pick(2), i)
	if c.pick(5) == 0 {
		s.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return s
}

// node is a node with a random place, or none.
func (c *churnCluster) node(name string) *corev1.Node {
	labels := map[string]string{}
	if c.pick(3) != 0 {
		labels[corev1.LabelTopologyRegion] = "r" + strconv.Itoa(c.pick(2))
		labels[corev1.LabelTopologyZone] = "z" + strconv.Itoa(c.pick(2))
	}
	return newNode(name, labels)
}
