package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// TestMultiClusterEndpoints runs istiod in cluster A with cluster B
// registered by istioctl's remote secret, a Service echo in one namespace
// of both clusters, and a sidecar of A asking A's istiod for its clusters
// and endpoints over ADS, as Envoy does.
func TestMultiClusterEndpoints(t *testing.T) {
	c := startTwoClusters(t, nil, nil)
	envA, envB, istiodNS, ns, p, ca, remote := c.a, c.b, c.istiodNS, c.ns, c.istiod, c.ca, c.remote
	ctx := context.Background()

	// echo: in A port http 80 → 8080 served as "echo"; in B the same name on
	// port 81 → 9090 served as "echo-b". The endpoints of B join A's port
	// of their name.
	echoA := echoIn(t, envA, ns, 80, 8080)
	echoB := echoIn(t, envB, ns, 81, 9090)
	echoA.endpoint(t, "echo-a1", "echo", "10.10.0.1")
	echoB.endpoint(t, "echo-b1", "echo-b", "10.20.0.1")
	host := "echo." + ns + ".svc.cluster.local"
	client := createRunningPod(ctx, t, envA, workload{Name: "client", Namespace: ns, ServiceAccount: "client", IP: "10.10.0.9"})
	token := envA.ServiceAccountToken(t, ns, "client", []string{"istio-ca"}, client)
	all, subsetA, subsetB := "outbound|80||"+host, "outbound|80|a|"+host, "outbound|80|b|"+host

	ads := dialSidecar(t, ca, token, clusterA, client)
	var cds []*clusterv3.Cluster
	ads.await(t, typeCluster, nil, "the outbound clusters of echo", func(res *discoveryv3.DiscoveryResponse) bool {
		cds = decodeClusters(t, res)
		return slices.ContainsFunc(cds, func(c *clusterv3.Cluster) bool { return c.GetName() == all })
	})
	names := []string{all, subsetA, subsetB}
	eds := func(what string, want map[string][]string) {
		t.Helper()
		var last map[string][]string
		ads.await(t, typeEndpoint, names, what, func(res *discoveryv3.DiscoveryResponse) bool {
			last = decodeLoads(t, res)
			for name, w := range want {
				if !slices.Equal(last[name], w) {
					return false
				}
			}
			return true
		}, func() string { return fmt.Sprint(last) })
	}

	t.Run("A's sidecar gets B's endpoints with mTLS beside A's, and the SANs of both", func(t *testing.T) {
		eds("A's and B's endpoints", map[string][]string{
			all: {"10.10.0.1:8080 mtls", "10.20.0.1:9090 mtls"},
		})
		i := slices.IndexFunc(cds, func(c *clusterv3.Cluster) bool { return c.GetName() == all })
		js, err := protojson.Marshal(cds[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, sa := range []string{"echo", "echo-b"} {
			if id := "spiffe://cluster.local/ns/" + ns + "/sa/" + sa; !strings.Contains(string(js), id) {
				t.Errorf("cluster %s does not verify %s: %s", all, id, js)
			}
		}
	})

	t.Run("an EndpointSlice change in B is pushed as an endpoint change alone", func(t *testing.T) {
		endpointBefore := metricValue(t, p.MonitoringAddr, `pilot_push_triggers{type="endpoint"}`)
		cdsBefore := ads.sent(typeCluster)
		echoB.endpoint(t, "echo-b2", "echo-b", "10.20.0.2")
		eds("B's second endpoint", map[string][]string{
			all: {"10.10.0.1:8080 mtls", "10.20.0.1:9090 mtls", "10.20.0.2:9090 mtls"},
		})
		if after := metricValue(t, p.MonitoringAddr, `pilot_push_triggers{type="endpoint"}`); after <= endpointBefore {
			t.Errorf("endpoint push triggers %v → %v; service %v, config %v", endpointBefore, after,
				metricValue(t, p.MonitoringAddr, `pilot_push_triggers{type="service"}`), metricValue(t, p.MonitoringAddr, `pilot_push_triggers{type="config"}`))
		}
		if n := ads.sent(typeCluster); n != cdsBefore {
			t.Errorf("clusters were sent again (%d → %d responses) for an endpoint change", cdsBefore, n)
		}
	})

	t.Run("a DestinationRule subset selects a cluster's endpoints by topology.istio.io/cluster", func(t *testing.T) {
		if _, err := istioClient(t, envA).NetworkingV1().DestinationRules(ns).Create(ctx, &istionetworkingv1.DestinationRule{
			ObjectMeta: metav1.ObjectMeta{Name: "by-cluster", Namespace: ns},
			Spec: networkingapi.DestinationRule{Host: host, Subsets: []*networkingapi.Subset{
				{Name: "a", Labels: map[string]string{"topology.istio.io/cluster": clusterA}},
				{Name: "b", Labels: map[string]string{"topology.istio.io/cluster": clusterB}},
			}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eds("the subsets' endpoints", map[string][]string{
			subsetA: {"10.10.0.1:8080 mtls"},
			subsetB: {"10.20.0.1:9090 mtls", "10.20.0.2:9090 mtls"},
		})
	})

	t.Run("B's API server stopped: A's changes still reach A's sidecar, B's last endpoints are kept", func(t *testing.T) {
		envB.Stop(t)
		echoA.endpoint(t, "echo-a2", "echo", "10.10.0.2")
		eds("A's second endpoint while B is down", map[string][]string{
			all:     {"10.10.0.1:8080 mtls", "10.10.0.2:8080 mtls", "10.20.0.1:9090 mtls", "10.20.0.2:9090 mtls"},
			subsetA: {"10.10.0.1:8080 mtls", "10.10.0.2:8080 mtls"},
		})
		envB.Restart(t)
		echoB.endpoint(t, "echo-b3", "echo-b", "10.20.0.3")
		eds("B's endpoint after its restart", map[string][]string{
			subsetB: {"10.20.0.1:9090 mtls", "10.20.0.2:9090 mtls", "10.20.0.3:9090 mtls"},
		})
	})

	t.Run("the remote secret deleted: B's endpoints are withdrawn", func(t *testing.T) {
		if err := envA.Client(t).CoreV1().Secrets(istiodNS).Delete(ctx, remote.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eds("A's endpoints alone", map[string][]string{
			all:     {"10.10.0.1:8080 mtls", "10.10.0.2:8080 mtls"},
			subsetA: {"10.10.0.1:8080 mtls", "10.10.0.2:8080 mtls"},
			subsetB: nil,
		})
	})
}

// echoService is Service echo of one cluster, whose EndpointSlice the test
// writes as the EndpointSlice controller would.
type echoService struct {
	env        *testenv.Env
	ns         string
	targetPort int32
	pods       []*corev1.Pod
}

// echoIn creates Service echo in ns of env with port "http" port →
// target.
func echoIn(t *testing.T, env *testenv.Env, ns string, port, target int32) *echoService {
	t.Helper()
	if _, err := env.Client(t).CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(target)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &echoService{env: env, ns: ns, targetPort: target}
}

// endpoint adds a running pod name with a sidecar (tlsMode istio), run as
// sa at ip, and writes the slice anew.
func (e *echoService) endpoint(t *testing.T, name, sa, ip string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	pod := createRunningPod(ctx, t, e.env, workload{Name: name, Namespace: e.ns, ServiceAccount: sa, IP: ip,
		Labels: map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"}})
	e.pods = append(e.pods, pod)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: e.ns, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(e.targetPort), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, p := range e.pods {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		})
	}
	slices := e.env.Client(t).DiscoveryV1().EndpointSlices(e.ns)
	if old, err := slices.Get(ctx, slice.Name, metav1.GetOptions{}); err == nil {
		slice.ResourceVersion = old.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sidecarStream is an ADS stream to istiod as an Envoy sidecar's, state of
// the world.
type sidecarStream struct {
	st       discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node     *corev3.Node
	received map[string]int // responses, by type
}

// dialSidecar opens the ADS stream of pod's sidecar with token, header
// cluster and node metadata CLUSTER_ID cluster.
func dialSidecar(t *testing.T, ca caTarget, token, cluster string, pod *corev1.Pod) *sidecarStream {
	t.Helper()
	return dialProxy(t, ca, "sidecar", token, cluster, pod)
}

// dialProxy is dialSidecar for a proxy of node type typ ("sidecar", or
// "router" for pilot-agent in router mode, a gateway).
func dialProxy(t *testing.T, ca caTarget, typ, token, cluster string, pod *corev1.Pod) *sidecarStream {
	t.Helper()
	pem, err := os.ReadFile(ca.root)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	conn, err := grpc.NewClient(ca.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: ca.san})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		conn.Close()
	})
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token, "ClusterID", cluster)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": pod.Namespace, "SERVICE_ACCOUNT": pod.Spec.ServiceAccountName,
		"CLUSTER_ID": cluster, "INSTANCE_IPS": pod.Status.PodIP})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: typ + "~" + pod.Status.PodIP + "~" + pod.Name + "." + pod.Namespace + "~" + pod.Namespace + ".svc.cluster.local", Metadata: md}
	return &sidecarStream{st: st, node: node, received: map[string]int{}}
}

// await subscribes to names of typeURL (nil: all) and reads responses,
// acknowledging each, until one of typeURL satisfies ok; describe, when
// given, tells what was last seen in a failure.
func (s *sidecarStream) await(t *testing.T, typeURL string, names []string, what string, ok func(*discoveryv3.DiscoveryResponse) bool, describe ...func() string) {
	t.Helper()
	req := &discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: typeURL, ResourceNames: names}
	if err := s.st.Send(req); err != nil {
		t.Fatalf("send %s request: %v", typeURL, err)
	}
	got := make(chan bool, 1)
	errs := make(chan error, 1)
	deadline := time.After(30 * time.Second)
	for {
		go func() {
			res, err := s.st.Recv()
			if err != nil {
				errs <- err
				return
			}
			s.received[res.GetTypeUrl()]++
			ack := &discoveryv3.DiscoveryRequest{TypeUrl: res.GetTypeUrl(), VersionInfo: res.GetVersionInfo(),
				ResponseNonce: res.GetNonce(), ResourceNames: names}
			if res.GetTypeUrl() != typeURL {
				ack.ResourceNames = nil
			}
			if err := s.st.Send(ack); err != nil {
				errs <- err
				return
			}
			got <- res.GetTypeUrl() == typeURL && ok(res)
		}()
		select {
		case done := <-got:
			if done {
				return
			}
		case err := <-errs:
			t.Fatalf("waiting for %s: %v", what, err)
		case <-deadline:
			last := ""
			if len(describe) > 0 {
				last = describe[0]()
			}
			t.Fatalf("no %s response with %s; last: %s", typeURL, what, last)
		}
	}
}

// sent is how many responses of typeURL the stream received.
func (s *sidecarStream) sent(typeURL string) int { return s.received[typeURL] }

func decodeClusters(t *testing.T, res *discoveryv3.DiscoveryResponse) []*clusterv3.Cluster {
	t.Helper()
	var out []*clusterv3.Cluster
	for _, a := range res.GetResources() {
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// decodeLoads lists each load assignment's endpoints, sorted, as
// "<address>:<port>" and " mtls" when marked for Istio mTLS.
func decodeLoads(t *testing.T, res *discoveryv3.DiscoveryResponse) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, a := range res.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		var eps []string
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				s := sa.GetAddress() + ":" + strconv.Itoa(int(sa.GetPortValue()))
				if e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue() == "istio" {
					s += " mtls"
				}
				eps = append(eps, s)
			}
		}
		slices.Sort(eps)
		out[cla.GetClusterName()] = eps
	}
	return out
}

// metricValue is the value of the metric line name (labels included) on
// /metrics, 0 when absent.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	v := metric(t, addr, name)
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s = %q", name, v)
	}
	return f
}
