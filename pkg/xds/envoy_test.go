package xds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbactcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const envoyManifests = baseManifests + `---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.20
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}, {name: tcp, port: 5432}]
`

// envoyNode is pilot-agent's node for an Envoy sidecar of pod <sa>-1.
func envoyNode(ns, sa, ip string) *core.Node {
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa, "INSTANCE_IPS": ip, "LABELS": map[string]any{"app": sa}})
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: "sidecar~" + ip + "~" + sa + "-1." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
}

// TestEnvoySidecarWarmsOverDelta plays Envoy's warming over incremental
// ADS: CDS, then EDS for every EDS cluster, LDS, then RDS for every route
// a listener names. Every name must be answered, or Envoy waits forever.
func TestEnvoySidecarWarmsOverDelta(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
	st := h.deltaStream(clientID)
	ask := func(first bool, typeURL string, names []string) []*discovery.Resource {
		t.Helper()
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}
		if first {
			req.Node = envoyNode("app", "client", "10.0.0.9")
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		r := recvDelta(t, st)
		if r.GetTypeUrl() != typeURL {
			t.Fatalf("asked %s, got %s", typeURL, r.GetTypeUrl())
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		return r.GetResources()
	}
	var edsNames []string
	for _, r := range ask(true, resource.ClusterType, nil) {
		c := unmarshal[*cluster.Cluster](t, r.GetResource(), &cluster.Cluster{})
		if c.GetType() == cluster.Cluster_EDS {
			edsNames = append(edsNames, c.GetEdsClusterConfig().GetServiceName())
		}
	}
	if len(edsNames) != 3 {
		t.Fatalf("EDS clusters %v, want echo's and web's two", edsNames)
	}
	if got := ask(false, resource.EndpointType, edsNames); len(got) != len(edsNames) {
		t.Fatalf("asked %d load assignments, got %d", len(edsNames), len(got))
	}
	var routes []string
	names := map[string]bool{}
	for _, r := range ask(false, resource.ListenerType, nil) {
		names[r.GetName()] = true
		l := unmarshal[*listener.Listener](t, r.GetResource(), &listener.Listener{})
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() == "envoy.filters.network.http_connection_manager" {
					m := unmarshal[*hcm.HttpConnectionManager](t, f.GetTypedConfig(), &hcm.HttpConnectionManager{})
					if rds := m.GetRds(); rds != nil {
						routes = append(routes, rds.GetRouteConfigName())
					}
				}
			}
		}
	}
	for _, want := range []string{"virtualOutbound", "virtualInbound", "0.0.0.0_80", "10.96.0.20_5432"} {
		if !names[want] {
			t.Errorf("no listener %s among %v", want, names)
		}
	}
	if got := ask(false, resource.RouteType, routes); len(routes) == 0 || len(got) != len(routes) {
		t.Fatalf("asked routes %v, got %d", routes, len(got))
	}
}

func TestEnvoySidecarOverStateOfTheWorld(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if r.GetTypeUrl() != resource.ListenerType || len(r.GetResources()) != 5 {
		// virtualOutbound, virtualInbound, 0.0.0.0_80, 0.0.0.0_8080 and 10.96.0.20_5432
		t.Fatalf("wildcard LDS: %d resources of %s, want the full set of 5", len(r.GetResources()), r.GetTypeUrl())
	}
}

func TestNodesOfOtherShapesAreRefused(t *testing.T) {
	for name, node := range map[string]*core.Node{
		"a ztunnel":           withID(envoyNode("app", "client", "10.0.0.9"), "ztunnel~10.0.0.9~gw-1.app~app.svc.cluster.local"),
		"a malformed node ID": withID(envoyNode("app", "client", "10.0.0.9"), "sidecar~10.0.0.9"),
		"an invalid address":  envoyNode("app", "client", "10.0.0.999"),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
			st := h.stream(clientID)
			if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}); err != nil {
				t.Fatal(err)
			}
			_, err := st.Recv()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
		})
	}
}

func withID(n *core.Node, id string) *core.Node { n.Id = id; return n }

func unmarshal[M proto.Message](t *testing.T, a *anypb.Any, m M) M {
	t.Helper()
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatal(err)
	}
	return m
}

// registrySnapshot is envoyManifests with a registry of pods: web-1 runs
// as "web" with label app=web, which a DENY policy selects.
func registrySnapshot(t *testing.T) *model.Snapshot {
	t.Helper()
	res := *modeltest.Load(t, envoyManifests+`---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-all, namespace: app}
spec: {selector: {matchLabels: {app: web}}, action: DENY, rules: [{}]}
`).Resources()
	res.Pods = []*model.Pod{{Meta: model.Meta{Name: "web-1", Namespace: "app"}, ServiceAccount: "web", Labels: map[string]string{"app": "web"}, IPs: []string{"10.0.0.20"}}}
	return model.Build("registry", model.Options{}, res)
}

func TestSidecarWorkloadComesFromItsPod(t *testing.T) {
	h := newHarness(t, registrySnapshot(t), nil)
	// web-1 claims labels that no policy selects and another address;
	// its pod's labels and address are used.
	node := envoyNode("app", "web", "10.9.9.9")
	node.Id = "sidecar~10.9.9.9~web-1.app~app.svc.cluster.local"
	node.Metadata.Fields["LABELS"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"app": structpb.NewStringValue("innocent")}})
	st := h.stream("spiffe://cluster.local/ns/app/sa/web")
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	for _, a := range r.GetResources() {
		l := unmarshal[*listener.Listener](t, a, &listener.Listener{})
		if l.GetName() != "virtualInbound" {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			if fc.GetName() == "virtualInbound-blackhole" {
				continue
			}
			if !chainHasRBAC(t, fc) {
				t.Errorf("chain %s has no RBAC: the labels the node claimed were used instead of its pod's", fc.GetName())
			}
		}
		return
	}
	t.Fatal("no virtualInbound")
}

func chainHasRBAC(t *testing.T, fc *listener.FilterChain) bool {
	for _, f := range fc.GetFilters() {
		switch f.GetName() {
		case "envoy.filters.network.rbac":
			return true
		case "envoy.filters.network.http_connection_manager":
			m := unmarshal[*hcm.HttpConnectionManager](t, f.GetTypedConfig(), &hcm.HttpConnectionManager{})
			for _, hf := range m.GetHttpFilters() {
				if hf.GetName() == "envoy.filters.http.rbac" {
					return true
				}
			}
		}
	}
	return false
}

func TestSidecarClaimingAnotherPodIsRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		id   string
		code codes.Code
	}{
		"a pod of another service account": {"sidecar~10.0.0.20~web-1.app~app.svc.cluster.local", codes.PermissionDenied},
		"a pod of another namespace":       {"sidecar~10.0.0.20~web-1.other~other.svc.cluster.local", codes.InvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, registrySnapshot(t), nil)
			st := h.stream(clientID) // app/client
			if err := st.Send(&discovery.DiscoveryRequest{Node: withID(envoyNode("app", "client", "10.0.0.20"), tc.id), TypeUrl: resource.ListenerType}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
		})
	}
}

// TestOneInvalidPolicyAmongMany: the invalid policy's rule is left out
// and reported; the thousand others are enforced.
func TestOneInvalidPolicyAmongMany(t *testing.T) {
	var b strings.Builder
	b.WriteString(envoyManifests)
	for i := range 1000 {
		fmt.Fprintf(&b, "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p-%04d, namespace: app}\n"+
			"spec: {selector: {matchLabels: {app: web}}, rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/c%d]}}]}]}\n", i, i)
	}
	b.WriteString("---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p-bad, namespace: app}\n" +
		"spec: {selector: {matchLabels: {app: web}}, rules: [{from: [{source: {ipBlocks: [not-a-cidr]}}]}]}\n")
	rec, log := logtest.New(t)
	h := newHarness(t, modeltest.Load(t, b.String()), func(c *Config) { c.Logger = log })
	st := h.stream("spiffe://cluster.local/ns/app/sa/web")
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "web", "10.0.0.20"), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	for _, a := range recv(t, st).GetResources() {
		l := unmarshal[*listener.Listener](t, a, &listener.Listener{})
		if l.GetName() != "virtualInbound" {
			continue
		}
		rbac := &rbactcp.RBAC{}
		for _, f := range l.GetFilterChains()[1].GetFilters() {
			if f.GetName() == "envoy.filters.network.rbac" {
				unmarshal(t, f.GetTypedConfig(), rbac)
			}
		}
		policies := rbac.GetRules().GetPolicies()
		if len(policies) != 1000 {
			t.Errorf("ALLOW filter holds %d policies, want the 1,000 valid ones", len(policies))
		}
		for name := range policies {
			if strings.Contains(name, "p-bad") {
				t.Errorf("the invalid policy's rule %s is enforced", name)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for rec.Count("WARN", "authorization policy not enforced", "app/p-bad") != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := rec.Count("WARN", "authorization policy not enforced"); n != 1 || rec.Count("app/p-bad") != 1 {
		t.Errorf("%d policy warnings, want exactly one, naming app/p-bad", n)
	}
	// Another model change while the problem lasts does not log it again.
	changed := b.String() + "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: web-2, namespace: app}\n" +
		"spec: {address: 10.0.0.21, labels: {app: web}, serviceAccount: web}\n"
	h.srv.push(modeltest.Load(t, changed), time.Time{})
	if n := rec.Count("WARN", "authorization policy not enforced"); n != 1 {
		t.Errorf("after another model change, %d policy warnings, want still one", n)
	}
}
