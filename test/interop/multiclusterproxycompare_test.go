package interop

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
	istiomodel "istio.io/istio/pilot/pkg/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	bxds "github.com/bulwark-mesh/bulwark/pkg/xds"
)

// TestRemoteClustersProxyMatchesIstio: proxies of the remote cluster of
// TestMultiClusterEndpointsMatchIstio's two clusters, one a client
// scoped by a Sidecar that selects its cluster, one an echo pod that
// remote's Service selects, each with a namesake of other labels in the
// local cluster, get the same clusters (names and TLS) and load
// assignments from Bulwark's xDS server, which finds their pods by their
// node and the cluster that authenticated them, as from Istio's, given
// the labels its registry of their CLUSTER_ID has for them.
func TestRemoteClustersProxyMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	local := mcService("echo", 8080, map[string]string{"echo-1": "10.10.0.1"}) + "---\n" +
		mcPod("echo-1", "echo", "10.10.0.1", "app: echo, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("echo-2", "local", "10.10.0.2", "app: local, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("client-1", "client", "10.10.0.9", "app: local, security.istio.io/tlsMode: istio")
	remote := mcService("echo", 9090, map[string]string{"echo-2": "10.20.0.2"}) + "---\n" +
		mcPod("echo-2", "echo-b", "10.20.0.2", "app: echo, security.istio.io/tlsMode: istio") + "---\n" +
		mcService("far", 7000, map[string]string{"far-1": "10.20.0.7"}) + "---\n" +
		mcPod("far-1", "far", "10.20.0.7", "app: far, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("client-1", "client", "10.20.0.9", "app: client, security.istio.io/tlsMode: istio")
	rules := `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  subsets:
  - {name: local, labels: {topology.istio.io/cluster: Kubernetes}}
  - {name: remote, labels: {topology.istio.io/cluster: cluster-b}}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: remote-clients, namespace: app}
spec:
  workloadSelector: {labels: {app: client, topology.istio.io/cluster: cluster-b}}
  egress: [{hosts: ["./far.app.svc.cluster.local"]}]
`
	s, store := twoClusterModels(t, local, remote, rules)
	ours := startOurXDS(t, store, compareLocal)

	for _, name := range []string{"client-1", "echo-2"} {
		t.Run(name, func(t *testing.T) {
			pod := podOf(t, remote, name)
			proxy := &istiomodel.Proxy{
				ID: pod.Name + "." + pod.Namespace, ConfigNamespace: pod.Namespace, IPAddresses: []string{pod.Status.PodIP},
				Metadata: &istiomodel.NodeMetadata{Namespace: pod.Namespace, ServiceAccount: pod.Spec.ServiceAccountName, ClusterID: compareRemote},
			}
			// Istio's labels of the proxy's workload: its pod's in the
			// registry of its CLUSTER_ID, with its cluster.
			proxy.Labels = s.Env().GetProxyWorkloadLabels(proxy)
			if proxy.Labels["app"] != pod.Labels["app"] || proxy.Labels[model.ClusterLabel] != compareRemote {
				t.Fatalf("Istio's labels of %s: %v", name, proxy.Labels)
			}
			proxy = s.SetupProxy(proxy)

			st := ours.sidecar(t, pod, compareRemote)
			ourClusters := st.clusters(t)
			var eds []string
			for _, c := range ourClusters {
				if c.GetType() == clusterv3.Cluster_EDS {
					eds = append(eds, c.GetName())
				}
			}
			loads := st.loads(t, eds)

			d := &differences{t: t, scenario: "remote proxy " + name, used: map[int]bool{}, list: []allowedDifference{}}
			istioClusters := s.Clusters(proxy)
			meshNames := func(cs []*clusterv3.Cluster) []string {
				var out []string
				for _, c := range cs {
					if strings.HasPrefix(c.GetName(), "outbound|") || strings.HasPrefix(c.GetName(), "inbound|") {
						out = append(out, c.GetName())
					}
				}
				slices.Sort(out)
				return out
			}
			diffNames(d, "cluster", meshNames(istioClusters), meshNames(ourClusters))
			byName := map[string]*clusterv3.Cluster{}
			for _, c := range ourClusters {
				byName[c.GetName()] = c
			}
			for _, ic := range istioClusters {
				if oc, ok := byName[ic.GetName()]; ok && strings.HasPrefix(ic.GetName(), "outbound|") {
					d.check("cluster TLS "+ic.GetName(), clusterTLS(ic), clusterTLS(oc), "")
				}
			}
			compareEndpoints(d, s.Endpoints(proxy), loads)
			if n := len(meshNames(istioClusters)); n < 2 {
				t.Fatalf("Istio gives %s %d clusters: the comparison would prove little", name, n)
			}
			t.Logf("%s: %d clusters and %d load assignments compared", name, len(meshNames(istioClusters)), len(loads))
		})
	}
}

// ourXDS is Bulwark's xDS server on the model of a store, in process,
// whose callers are authenticated by header: identity "x-sa" of namespace
// "x-ns", reviewed by cluster "x-cluster".
type ourXDS struct{ conn *grpc.ClientConn }

type headerCaller struct{}

func (headerCaller) Kind() string { return "test" }
func (headerCaller) Authenticate(ctx context.Context) (*authn.Caller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	id, err := spiffeid.FromString("spiffe://" + trustDomain + "/ns/" + get("x-ns") + "/sa/" + get("x-sa"))
	if err != nil {
		return nil, err
	}
	return &authn.Caller{Identities: []spiffeid.ID{id}, Authenticator: "test", ClusterID: get("x-cluster")}, nil
}

func startOurXDS(t *testing.T, store *model.Store, clusterID string) *ourXDS {
	t.Helper()
	_, log := logtest.New(t)
	srv, err := bxds.New(bxds.Config{Model: store, Authenticator: headerCaller{}, ClusterID: clusterID, Logger: log,
		TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain), DebounceQuiet: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(grpc.ForceServerCodecV2(bxds.Codec()))
	srv.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		cancel()
		<-done
	})
	return &ourXDS{conn: conn}
}

// ourSidecar is an Envoy sidecar's ADS stream to ourXDS.
type ourSidecar struct {
	st   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node *corev3.Node
}

// sidecar opens the stream of pod's sidecar, authenticated by cluster,
// whose node names the pod and nothing of its labels.
func (o *ourXDS) sidecar(t *testing.T, pod *corev1.Pod, cluster string) *ourSidecar {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-ns", pod.Namespace, "x-sa", pod.Spec.ServiceAccountName, "x-cluster", cluster)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(o.conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": pod.Namespace, "SERVICE_ACCOUNT": pod.Spec.ServiceAccountName,
		"CLUSTER_ID": cluster, "INSTANCE_IPS": pod.Status.PodIP})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "sidecar~" + pod.Status.PodIP + "~" + pod.Name + "." + pod.Namespace + "~" + pod.Namespace + ".svc.cluster.local", Metadata: md}
	return &ourSidecar{st: st, node: node}
}

// ask sends a request of typeURL for names and returns its response.
func (s *ourSidecar) ask(t *testing.T, typeURL string, names []string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	if err := s.st.Send(&discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	for {
		res, err := s.st.Recv()
		if err != nil {
			t.Fatalf("%s: %v", typeURL, err)
		}
		if res.GetTypeUrl() == typeURL {
			return res
		}
	}
}

func (s *ourSidecar) clusters(t *testing.T) []*clusterv3.Cluster {
	return decodeClusters(t, s.ask(t, typeCluster, nil))
}

func (s *ourSidecar) loads(t *testing.T, names []string) []*endpointv3.ClusterLoadAssignment {
	t.Helper()
	var out []*endpointv3.ClusterLoadAssignment
	for _, a := range s.ask(t, typeEndpoint, names).GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		out = append(out, cla)
	}
	return out
}
