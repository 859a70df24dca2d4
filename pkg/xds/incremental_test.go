package xds

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// randomMesh is a mesh a test changes at random: services of two
// namespaces, each with its own pods, and policies.
type randomMesh struct {
	rnd      *rand.Rand
	version  int
	services map[string]*meshService // by "<name>.<namespace>"
	pods     map[string]*meshPod     // by "<name>.<namespace>"
	next     int                     // for names and addresses
	mtls     string                  // namespace a's PeerAuthentication mode
	allowNS  string                  // the namespace svc-1's AuthorizationPolicy allows
	jwt      bool                    // a RequestAuthentication selects svc-2
	drTLS    string                  // svc-0's DestinationRule TLS mode
	v2Label  string                  // the label value of svc-0's subset v2
	vs       int                     // which of virtualServices the mesh has
	// which of l4VirtualServices, delegateVirtualServices,
	// exportedVirtualServices, extraDestinationRules, serviceEntries and
	// sidecars the mesh has
	l4, delegate, exported, extraDR, entries, sidecar int
	drPrivate                                         bool // svc-0's DestinationRule exported to a alone
}

type meshService struct {
	name, ns string
	headless bool
	target   uint32 // the http port's target port
	vip      string
	private  bool // exported to its own namespace only
}

type meshPod struct {
	name, ns, svc, sa, ip, version string
	mtls                           bool // labelled tlsMode=istio
	proxy                          bool // a connected proxy's own pod: stays where it is
}

func newRandomMesh(seed uint64) *randomMesh {
	m := &randomMesh{rnd: rand.New(rand.NewPCG(seed, seed)), services: map[string]*meshService{}, pods: map[string]*meshPod{},
		mtls: "STRICT", drTLS: "ISTIO_MUTUAL", v2Label: "v2", allowNS: "a", sidecar: 1}
	for i := range 4 {
		ns := []string{"a", "b"}[i%2]
		svc := m.addService(fmt.Sprintf("svc-%d", i), ns)
		for range 2 {
			m.addPod(svc)
		}
	}
	return m
}

func (m *randomMesh) addService(name, ns string) *meshService {
	m.next++
	svc := &meshService{name: name, ns: ns, target: 8080, vip: fmt.Sprintf("10.96.0.%d", m.next)}
	m.services[name+"."+ns] = svc
	return svc
}

func (m *randomMesh) addPod(svc *meshService) *meshPod {
	m.next++
	p := &meshPod{name: fmt.Sprintf("%s-%d", svc.name, m.next), ns: svc.ns, svc: svc.name, sa: svc.name,
		ip: fmt.Sprintf("10.1.%d.%d", m.next/250, m.next%250+1), version: "v1", mtls: true}
	m.pods[p.name+"."+p.ns] = p
	return p
}

func pick[V any](rnd *rand.Rand, m map[string]V, ok func(V) bool) (V, bool) {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if ok(m[k]) {
			keys = append(keys, k)
		}
	}
	var zero V
	if len(keys) == 0 {
		return zero, false
	}
	return m[keys[rnd.IntN(len(keys))]], true
}

func anyOf[V any](V) bool { return true }

// endpointChange changes endpoints only, and says what it did.
func (m *randomMesh) endpointChange() string {
	free := func(p *meshPod) bool { return !p.proxy }
	switch m.rnd.IntN(5) {
	case 0:
		if p, ok := pick(m.rnd, m.pods, free); ok {
			m.next++
			p.ip = fmt.Sprintf("10.2.%d.%d", m.next/250, m.next%250+1)
			return "move " + p.name
		}
	case 1:
		if svc, ok := pick(m.rnd, m.services, anyOf); ok {
			return "start a pod of " + m.addPod(svc).svc
		}
	case 2:
		if p, ok := pick(m.rnd, m.pods, free); ok {
			delete(m.pods, p.name+"."+p.ns)
			return "stop " + p.name
		}
	case 3:
		if p, ok := pick(m.rnd, m.pods, free); ok {
			return m.relabel(p)
		}
	case 4:
		if p, ok := pick(m.rnd, m.pods, free); ok {
			p.mtls = !p.mtls
			return "toggle tlsMode of " + p.name
		}
	}
	return "nothing"
}

// authorizationChange changes an AuthorizationPolicy or a
// RequestAuthentication.
func (m *randomMesh) authorizationChange() string {
	if m.rnd.IntN(2) == 0 {
		m.allowNS = map[string]string{"a": "b", "b": "a"}[m.allowNS]
		return "allow namespace " + m.allowNS
	}
	m.jwt = !m.jwt
	return fmt.Sprintf("request authentication %t", m.jwt)
}

// otherChange changes something else than endpoints, or endpoints in a
// way other resources read.
func (m *randomMesh) otherChange() string {
	switch m.rnd.IntN(11) {
	case 9, 10:
		m.vs = m.rnd.IntN(len(virtualServices))
		return fmt.Sprintf("virtual services %d", m.vs)
	case 0:
		ns := []string{"a", "b"}[m.rnd.IntN(2)]
		m.next++
		svc := m.addService(fmt.Sprintf("new-%d", m.next), ns)
		m.addPod(svc)
		return "add service " + svc.name
	case 1:
		if svc, ok := pick(m.rnd, m.services, func(s *meshService) bool { return strings.HasPrefix(s.name, "new-") }); ok {
			delete(m.services, svc.name+"."+svc.ns)
			return "remove service " + svc.name
		}
	case 2:
		m.mtls = []string{"STRICT", "PERMISSIVE", "DISABLE"}[m.rnd.IntN(3)]
		return "peer authentication " + m.mtls
	case 3:
		m.drTLS = []string{"ISTIO_MUTUAL", "DISABLE"}[m.rnd.IntN(2)]
		m.v2Label = []string{"v2", "v1"}[m.rnd.IntN(2)]
		return "destination rule " + m.drTLS + " " + m.v2Label
	case 4:
		if svc, ok := pick(m.rnd, m.services, anyOf); ok {
			svc.headless = !svc.headless
			return "toggle headless " + svc.name
		}
	case 5:
		if p, ok := pick(m.rnd, m.pods, func(p *meshPod) bool { return !p.proxy }); ok {
			p.sa = map[bool]string{true: "other", false: p.svc}[p.sa == p.svc]
			return "service account of " + p.name
		}
	case 6:
		if svc, ok := pick(m.rnd, m.services, anyOf); ok {
			svc.target = map[uint32]uint32{8080: 8081, 8081: 8080}[svc.target]
			return "target port of " + svc.name
		}
	case 7:
		if p, ok := pick(m.rnd, m.pods, func(p *meshPod) bool { return p.proxy }); ok {
			return m.relabel(p) // the proxy's own scope changes
		}
	case 8:
		if svc, ok := pick(m.rnd, m.services, anyOf); ok {
			svc.private = !svc.private
			return fmt.Sprintf("export %s to its namespace only %t", svc.name, svc.private)
		}
	}
	return "nothing"
}

// ruleChange changes VirtualServices, DestinationRules, ServiceEntries
// or Sidecars.
func (m *randomMesh) ruleChange() string {
	pickOf := func(n int) int { return m.rnd.IntN(n) }
	switch m.rnd.IntN(8) {
	case 0:
		m.vs = pickOf(len(virtualServices))
		return fmt.Sprintf("virtual services %d", m.vs)
	case 1:
		m.l4 = pickOf(len(l4VirtualServices))
		return fmt.Sprintf("tls and tcp virtual services %d", m.l4)
	case 2:
		m.delegate = pickOf(len(delegateVirtualServices))
		return fmt.Sprintf("delegated virtual services %d", m.delegate)
	case 3:
		m.exported = pickOf(len(exportedVirtualServices))
		return fmt.Sprintf("exported virtual services %d", m.exported)
	case 4:
		m.extraDR = pickOf(len(extraDestinationRules))
		return fmt.Sprintf("destination rules %d", m.extraDR)
	case 5:
		m.drPrivate = !m.drPrivate
		return fmt.Sprintf("svc-0's destination rule private %t", m.drPrivate)
	case 6:
		m.entries = pickOf(len(serviceEntries))
		return fmt.Sprintf("service entries %d", m.entries)
	default:
		m.sidecar = pickOf(len(sidecars))
		return fmt.Sprintf("sidecars %d", m.sidecar)
	}
}

func (m *randomMesh) relabel(p *meshPod) string {
	p.version = map[string]string{"v1": "v2", "v2": "v1"}[p.version]
	return "relabel " + p.name
}

func (m *randomMesh) snapshot(t *testing.T) *model.Snapshot {
	t.Helper()
	m.version++
	res := model.Resources{Pods: []*model.Pod{}}
	for _, key := range slices.Sorted(maps.Keys(m.services)) {
		s := m.services[key]
		svc := &model.Service{
			Meta: model.Meta{Name: s.name, Namespace: s.ns}, Selector: map[string]string{"app": s.name}, Headless: s.headless,
			Ports:     []model.Port{{Name: "http", Port: 80, TargetPort: s.target, Protocol: "HTTP"}, {Name: "tcp", Port: 9000, Protocol: "TCP"}},
			Endpoints: map[uint32][]model.Endpoint{},
		}
		if !s.headless {
			svc.Addresses = []string{s.vip}
		}
		if s.private {
			svc.ExportTo = []string{"."}
		}
		for _, pk := range slices.Sorted(maps.Keys(m.pods)) {
			p := m.pods[pk]
			if p.svc != s.name || p.ns != s.ns {
				continue
			}
			for _, port := range []struct{ svc, target uint32 }{{80, s.target}, {9000, 9000}} {
				svc.Endpoints[port.svc] = append(svc.Endpoints[port.svc], model.Endpoint{
					Address: p.ip, Port: port.target, ServiceAccount: p.sa, Namespace: p.ns, Labels: p.labels(), Weight: 1,
				})
			}
		}
		res.Services = append(res.Services, svc)
	}
	for _, pk := range slices.Sorted(maps.Keys(m.pods)) {
		p := m.pods[pk]
		res.Pods = append(res.Pods, &model.Pod{Meta: model.Meta{Name: p.name, Namespace: p.ns}, ServiceAccount: p.sa, Labels: p.labels(), IPs: []string{p.ip}})
	}
	slices.SortFunc(res.Pods, func(a, b *model.Pod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	drExport := ""
	if m.drPrivate {
		drExport = "\n  exportTo: [\".\"]"
	}
	rules := l4VirtualServices[m.l4] + delegateVirtualServices[m.delegate] + exportedVirtualServices[m.exported] +
		extraDestinationRules[m.extraDR] + serviceEntries[m.entries] + sidecars[m.sidecar]
	policies := modeltest.Load(t, fmt.Sprintf(`
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: a}
spec: {mtls: {mode: %s}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: b}
spec:
  selector: {matchLabels: {app: svc-1}}
  rules: [{from: [{source: {namespaces: [%s]}}]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-0, namespace: a}
spec:
  host: svc-0.a.svc.cluster.local%s
  trafficPolicy: {tls: {mode: %s}}
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: %s}}]
%s%s%s`, m.mtls, m.allowNS, drExport, m.drTLS, m.v2Label, m.requestAuthentication(), virtualServices[m.vs], rules)).Resources()
	res.PeerAuthentications = policies.PeerAuthentications
	res.AuthorizationPolicies = policies.AuthorizationPolicies
	res.RequestAuthentications = policies.RequestAuthentications
	res.DestinationRules = policies.DestinationRules
	res.VirtualServices = policies.VirtualServices
	res.ServiceEntries = policies.ServiceEntries
	res.Sidecars = policies.Sidecars
	return model.Build(fmt.Sprintf("random-%d", m.version), model.Options{}, res)
}

// virtualServices are the sets of VirtualServices the random mesh moves
// between: none; a weighted split of svc-0 between its subsets; svc-0
// private to namespace a, its first rule for clients labelled version v1
// alone; svc-1 and every service of namespace a by a wildcard, with a
// timeout and a consistent hash.
var virtualServices = []string{"", `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-0, namespace: a}
spec:
  hosts: [svc-0]
  http:
  - route:
    - {destination: {host: svc-0, subset: v1}, weight: 80}
    - {destination: {host: svc-0, subset: v2}, weight: 20}
`, `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-0, namespace: a}
spec:
  hosts: [svc-0]
  exportTo: ["."]
  http:
  - match: [{sourceLabels: {version: v1}}]
    route: [{destination: {host: svc-0, subset: v1}}]
  - route: [{destination: {host: svc-1.b.svc.cluster.local}}]
`, `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: wide, namespace: b}
spec:
  hosts: [svc-1.b.svc.cluster.local, "*.a.svc.cluster.local"]
  http:
  - match: [{uri: {prefix: /slow}}]
    timeout: 3s
    route: [{destination: {host: svc-1.b.svc.cluster.local}}]
  - route: [{destination: {host: svc-0.a.svc.cluster.local, subset: v2}}]
`}

// l4VirtualServices are tls and tcp routes: none; svc-3's tcp port split
// between svc-3 and svc-2; the entry api.example.com routed by SNI to
// svc-1's tcp port.
var l4VirtualServices = []string{"", `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tcp-split, namespace: b}
spec:
  hosts: [svc-3]
  tcp:
  - match: [{port: 9000}]
    route:
    - {destination: {host: svc-3, port: {number: 9000}}, weight: 70}
    - {destination: {host: svc-2.a.svc.cluster.local, port: {number: 9000}}, weight: 30}
`, `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tls-sni, namespace: a}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{port: 443, sniHosts: [api.example.com]}]
    route: [{destination: {host: svc-1.b.svc.cluster.local, port: {number: 9000}}}]
`}

// delegateVirtualServices are svc-2's routes delegating /api to a
// VirtualService of namespace b: none; the delegate routing to svc-1;
// routing to svc-3 with a timeout; exported to b alone, so that svc-2's
// namespace cannot follow it.
var delegateVirtualServices = []string{"", delegated(`route: [{destination: {host: svc-1}}]`, ""),
	delegated(`timeout: 2s
    route: [{destination: {host: svc-3}}]`, ""),
	delegated(`route: [{destination: {host: svc-1}}]`, "\n  exportTo: [b]")}

func delegated(rule, exportTo string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: root, namespace: a}
spec:
  hosts: [svc-2]
  http:
  - match: [{uri: {prefix: /api}}]
    delegate: {name: del, namespace: b}
  - route: [{destination: {host: svc-2}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: del, namespace: b}
spec:` + exportTo + `
  http:
  - match: [{uri: {prefix: /api/v1}}]
    ` + rule + "\n"
}

// exportedVirtualServices are svc-3's routes by exportTo: none; seen in b
// alone, one rule for clients labelled version v2; seen in a alone;
// bound to a gateway alone, which sidecars do not read.
var exportedVirtualServices = []string{"", exportedVS("exportTo: [b]"), exportedVS("exportTo: [a]"), exportedVS("gateways: [gw]")}

func exportedVS(binding string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-3, namespace: b}
spec:
  hosts: [svc-3]
  ` + binding + `
  http:
  - match: [{sourceLabels: {version: v2}}]
    retries: {attempts: 5, perTryTimeout: 1s}
    route: [{destination: {host: svc-3}}]
  - timeout: 5s
    route: [{destination: {host: svc-3}}]
`
}

// extraDestinationRules: none; a root namespace rule for every service of
// b, plaintext; the same exported to a alone; svc-1's own rule with a
// subset and a consistent hash, private to b.
var extraDestinationRules = []string{"", wideRule(""), wideRule("\n  exportTo: [a]"), `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-1, namespace: b}
spec:
  host: svc-1
  exportTo: ["."]
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
  subsets: [{name: v1, labels: {version: v1}}]
`}

func wideRule(exportTo string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: wide, namespace: istio-system}
spec:
  host: "*.b.svc.cluster.local"` + exportTo + `
  trafficPolicy: {tls: {mode: DISABLE}}
`
}

// serviceEntries: none; api.example.com (tls, no resolution) of a and
// ext.example.com (http, static) of b; the same with ext exported to a
// alone; with ext at another address.
var serviceEntries = []string{"", entries("", "192.0.2.10"), entries("\n  exportTo: [a]", "192.0.2.10"), entries("", "192.0.2.11")}

func entries(exportTo, addr string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: a}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{number: 443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: b}
spec:
  hosts: [ext.example.com]` + exportTo + `
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: ` + addr + `}]
`
}

// sidecars scope namespace b's proxies: not at all; to b; to b, a and the
// root namespace; svc-3's to itself and svc-2.
var sidecars = []string{"", sidecarOf("", `"./*"`), sidecarOf("", `"./*", "a/*", "istio-system/*"`),
	sidecarOf("\n  workloadSelector: {labels: {app: svc-3}}", `"./svc-3.b.svc.cluster.local", "a/svc-2.a.svc.cluster.local"`)}

func sidecarOf(selector, hosts string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: scope, namespace: b}
spec:` + selector + `
  egress: [{hosts: [` + hosts + `]}]
`
}

func (m *randomMesh) requestAuthentication() string {
	if !m.jwt {
		return ""
	}
	return `---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: a}
spec:
  selector: {matchLabels: {app: svc-2}}
  jwtRules: [{issuer: "https://issuer.example", jwks: '{"keys":[]}'}]
`
}

func (p *meshPod) labels() map[string]string {
	l := map[string]string{"app": p.svc, "version": p.version}
	if p.mtls {
		l[model.TLSModeLabel] = "istio"
	}
	return l
}

// fakeEnvoy is an Envoy sidecar on an incremental stream, as Envoy
// subscribes: every cluster, the endpoints of each EDS cluster, every
// listener, the routes they name; each response acknowledged.
type fakeEnvoy struct {
	t      *testing.T
	nodeID string
	stream deltaStream
	sotw   discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient // instead of stream
	nonces map[string]string                                                    // state of the world: the last, by type URL

	mu       sync.Mutex
	held     map[string]map[string][]byte // by type URL, name
	subs     map[string]map[string]bool   // EDS and RDS names subscribed
	received map[string]int               // resources received, by type URL
}

// startFakeEnvoy connects the sidecar of pod p, over an incremental
// stream or, with sotw, a state-of-the-world one.
func startFakeEnvoy(t *testing.T, h *harness, p *meshPod, sotw bool) *fakeEnvoy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-id", "spiffe://cluster.local/ns/"+p.ns+"/sa/"+p.sa)
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": p.ns, "SERVICE_ACCOUNT": p.sa, "INSTANCE_IPS": p.ip, "LABELS": map[string]any{"app": p.svc}})
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEnvoy{t: t, nodeID: "sidecar~" + p.ip + "~" + p.name + "." + p.ns + "~" + p.ns + ".svc.cluster.local", nonces: map[string]string{},
		held: map[string]map[string][]byte{}, subs: map[string]map[string]bool{resource.EndpointType: {}, resource.RouteType: {}}, received: map[string]int{}}
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		e.held[typeURL] = map[string][]byte{}
	}
	node := &core.Node{Id: e.nodeID, Metadata: md}
	client := discovery.NewAggregatedDiscoveryServiceClient(h.conn)
	if sotw {
		if e.sotw, err = client.StreamAggregatedResources(ctx); err != nil {
			t.Fatal(err)
		}
		e.sendSotw(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType})
		e.sendSotw(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType})
		go e.runSotw()
		return e
	}
	if e.stream, err = client.DeltaAggregatedResources(ctx); err != nil {
		t.Fatal(err)
	}
	e.send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType})
	e.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ListenerType})
	go e.run()
	return e
}

func (e *fakeEnvoy) sendSotw(req *discovery.DiscoveryRequest) {
	if err := e.sotw.Send(req); err != nil && e.t.Context().Err() == nil {
		e.t.Errorf("%s: send: %v", e.nodeID, err)
	}
}

// runSotw holds each response's resources as all there are of its type,
// acknowledges it, and asks for the endpoints and routes it names.
func (e *fakeEnvoy) runSotw() {
	for {
		resp, err := e.sotw.Recv()
		if err != nil {
			return
		}
		typeURL := resp.GetTypeUrl()
		e.mu.Lock()
		held := map[string][]byte{}
		for _, r := range resp.GetResources() {
			var name string
			switch typeURL {
			case resource.ClusterType:
				name = unmarshalName(e.t, r.GetValue(), &cluster.Cluster{})
			case resource.ListenerType:
				name = unmarshalName(e.t, r.GetValue(), &listener.Listener{})
			case resource.EndpointType:
				name = unmarshalName(e.t, r.GetValue(), &endpoint.ClusterLoadAssignment{})
			case resource.RouteType:
				name = unmarshalName(e.t, r.GetValue(), &route.RouteConfiguration{})
			}
			held[name] = r.GetValue()
		}
		e.held[typeURL] = held
		e.received[typeURL] += len(resp.GetResources())
		e.nonces[typeURL] = resp.GetNonce()
		ack := &discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		var follow *discovery.DiscoveryRequest
		switch typeURL {
		case resource.ClusterType:
			follow = e.resubscribeSotw(resource.EndpointType, edsNames(e.t, held))
		case resource.ListenerType:
			follow = e.resubscribeSotw(resource.RouteType, routeNames(e.t, held))
		case resource.EndpointType, resource.RouteType:
			ack.ResourceNames = slices.Sorted(maps.Keys(e.subs[typeURL]))
		}
		e.mu.Unlock()
		e.sendSotw(ack)
		if follow != nil {
			e.sendSotw(follow)
		}
	}
}

func (e *fakeEnvoy) resubscribeSotw(typeURL string, want map[string]bool) *discovery.DiscoveryRequest {
	if maps.Equal(want, e.subs[typeURL]) {
		return nil
	}
	e.subs[typeURL] = want
	maps.DeleteFunc(e.held[typeURL], func(n string, _ []byte) bool { return !want[n] })
	return &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: slices.Sorted(maps.Keys(want)), ResponseNonce: e.nonces[typeURL]}
}

// unmarshalName is the name of a resource that is a message like m.
func unmarshalName(t *testing.T, raw []byte, m proto.Message) string {
	if err := proto.Unmarshal(raw, m); err != nil {
		t.Error(err)
	}
	if cla, ok := m.(*endpoint.ClusterLoadAssignment); ok {
		return cla.GetClusterName()
	}
	return m.(interface{ GetName() string }).GetName()
}

func (e *fakeEnvoy) send(req *discovery.DeltaDiscoveryRequest) {
	if err := e.stream.Send(req); err != nil && e.t.Context().Err() == nil {
		e.t.Errorf("%s: send: %v", e.nodeID, err)
	}
}

func (e *fakeEnvoy) run() {
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			return
		}
		e.mu.Lock()
		held := e.held[resp.GetTypeUrl()]
		for _, r := range resp.GetResources() {
			held[r.GetName()] = r.GetResource().GetValue()
		}
		for _, n := range resp.GetRemovedResources() {
			delete(held, n)
		}
		e.received[resp.GetTypeUrl()] += len(resp.GetResources())
		var follow *discovery.DeltaDiscoveryRequest
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			follow = e.resubscribe(resource.EndpointType, edsNames(e.t, held))
		case resource.ListenerType:
			follow = e.resubscribe(resource.RouteType, routeNames(e.t, held))
		}
		e.mu.Unlock()
		e.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
		if follow != nil {
			e.send(follow)
		}
	}
}

// resubscribe makes want the names subscribed to of typeURL, returning
// the request that says so, if any.
func (e *fakeEnvoy) resubscribe(typeURL string, want map[string]bool) *discovery.DeltaDiscoveryRequest {
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL}
	subs := e.subs[typeURL]
	for n := range want {
		if !subs[n] {
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
	}
	for n := range subs {
		if !want[n] {
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
			delete(e.held[typeURL], n) // Envoy drops what it unsubscribed from
		}
	}
	if len(req.ResourceNamesSubscribe)+len(req.ResourceNamesUnsubscribe) == 0 {
		return nil
	}
	e.subs[typeURL] = want
	return req
}

func edsNames(t *testing.T, clusters map[string][]byte) map[string]bool {
	out := map[string]bool{}
	for _, raw := range clusters {
		var c cluster.Cluster
		if err := proto.Unmarshal(raw, &c); err != nil {
			t.Error(err)
		}
		if c.GetType() == cluster.Cluster_EDS {
			out[cmpOr(c.GetEdsClusterConfig().GetServiceName(), c.GetName())] = true
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func routeNames(t *testing.T, listeners map[string][]byte) map[string]bool {
	out := map[string]bool{}
	for _, raw := range listeners {
		var l listener.Listener
		if err := proto.Unmarshal(raw, &l); err != nil {
			t.Error(err)
		}
		for _, fc := range append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain()) {
			for _, f := range fc.GetFilters() {
				var m hcm.HttpConnectionManager
				if f.GetName() == "envoy.filters.network.http_connection_manager" && f.GetTypedConfig().UnmarshalTo(&m) == nil && m.GetRds() != nil {
					out[m.GetRds().GetRouteConfigName()] = true
				}
			}
		}
	}
	return out
}

// want is what a fresh full generation gives the proxy of e's stream in
// the push state in force, for what e subscribes to.
func (e *fakeEnvoy) want(h *harness) (map[string]map[string][]byte, string) {
	st := h.srv.state.Load()
	var wl *identity.Workload
	for _, p := range h.srv.proxies() {
		p.mu.Lock()
		if p.node.GetId() == e.nodeID {
			wl = p.wl
		}
		p.mu.Unlock()
	}
	if wl == nil {
		return nil, st.snap.Version
	}
	_, gen := h.srv.meshOf(st).Scope(wl, st.snap)
	out := map[string]map[string][]byte{}
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		out[typeURL] = map[string][]byte{}
		for _, r := range gen(st.snap, typeURL, nil, true) {
			raw, err := r.Marshal()
			if err != nil {
				e.t.Fatal(err)
			}
			out[typeURL][r.Name] = raw
		}
	}
	// Envoy subscribes to the endpoints of its EDS clusters and the routes
	// of its listeners; a route or load assignment nobody names is not
	// sent.
	eds, rds := edsNames(e.t, out[resource.ClusterType]), routeNames(e.t, out[resource.ListenerType])
	maps.DeleteFunc(out[resource.EndpointType], func(n string, _ []byte) bool { return !eds[n] })
	maps.DeleteFunc(out[resource.RouteType], func(n string, _ []byte) bool { return !rds[n] })
	return out, st.snap.Version
}

// diff describes how e's holdings differ from want; "" when they do not.
func (e *fakeEnvoy) diff(want map[string]map[string][]byte) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for typeURL, w := range want {
		got := e.held[typeURL]
		for n, raw := range w {
			if g, ok := got[n]; !ok {
				out = append(out, "missing "+shortType(typeURL)+" "+n)
			} else if string(g) != string(raw) {
				out = append(out, "stale "+shortType(typeURL)+" "+n)
			}
		}
		for n := range got {
			if _, ok := w[n]; !ok {
				out = append(out, "extra "+shortType(typeURL)+" "+n)
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// TestIncrementalPushesEndAsAFullGeneration changes a mesh at random —
// endpoints mostly, services and policies sometimes — and checks after
// every change that each sidecar holds exactly what a fresh full
// generation gives it, while endpoint changes are pushed as load
// assignments alone.
func TestIncrementalPushesEndAsAFullGeneration(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MESH_SEED"); s != "" { // to replay a failure
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("MESH_SEED: %v", err)
		}
	}
	t.Logf("seed %d (MESH_SEED replays it)", seed)
	m := newRandomMesh(seed)
	var proxies []*meshPod
	for _, key := range []string{"svc-0", "svc-1", "svc-2", "svc-3"} {
		for _, p := range m.pods {
			if p.svc == key && len(proxies) < 5 {
				p.proxy = true
				proxies = append(proxies, p)
				break
			}
		}
	}
	h := newHarness(t, m.snapshot(t), nil)
	var fleet []*fakeEnvoy
	for i, p := range proxies {
		fleet = append(fleet, startFakeEnvoy(t, h, p, i == len(proxies)-1))
	}
	converge := func(step string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, e := range fleet {
			for {
				want, version := e.want(h)
				d := e.diff(want)
				if want != nil && d == "" && version == h.store.Current().Version {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %s (seed %d): %s differs from a full generation: %s", step, seed, e.nodeID, d)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	converge("connecting")
	pushes := func(trigger string) float64 {
		return testutil.ToFloat64(h.srv.metrics.pushTriggers.WithLabelValues(trigger))
	}
	endpointPushes := func() float64 { return pushes("endpoint") }
	for i := range 80 {
		var did []string
		kind := []int{0, 1, 2, 2, 2, 3, 3, 3, 3, 3}[m.rnd.IntN(10)] // 0: other; 1: authorization; 2: rules; 3: endpoints
		endpointsOnly := kind > 2
		for range 1 + m.rnd.IntN(3) {
			switch kind {
			case 0:
				did = append(did, m.otherChange())
			case 1:
				did = append(did, m.authorizationChange())
			case 2:
				did = append(did, m.ruleChange())
			default:
				did = append(did, m.endpointChange())
			}
		}
		before := map[*fakeEnvoy]map[string]int{}
		for _, e := range fleet {
			e.mu.Lock()
			before[e] = maps.Clone(e.received)
			e.mu.Unlock()
		}
		triggered, services, configs := endpointPushes(), pushes("service"), pushes("config")
		h.store.Publish(m.snapshot(t))
		step := fmt.Sprintf("step %d (%s)", i, strings.Join(did, "; "))
		converge(step)
		untouched := []string{resource.ClusterType, resource.EndpointType, resource.RouteType}
		switch {
		case endpointsOnly && (endpointPushes() == triggered || pushes("service") != services || pushes("config") != configs):
			continue // not endpoints only: a service account or tlsMode is read elsewhere
		case endpointsOnly:
			untouched = []string{resource.ClusterType, resource.ListenerType, resource.RouteType}
		case kind == 0 || kind == 2:
			continue
		}
		for _, e := range fleet {
			e.mu.Lock()
			for _, typeURL := range untouched {
				if e.received[typeURL] != before[e][typeURL] {
					t.Errorf("%s: %s was sent %s resources", step, e.nodeID, shortType(typeURL))
				}
			}
			e.mu.Unlock()
		}
	}
	if endpointPushes() == 0 || pushes("service") == 0 {
		t.Errorf("pushes of endpoints only: %v, of services: %v; want some of each", endpointPushes(), pushes("service"))
	}
}
