package kubesource

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestExposuresOfAService(t *testing.T) {
	lb := func(labels map[string]string, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "istio-system", Labels: labels},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalIPs: []string{"203.0.113.9"},
				Ports: []corev1.ServicePort{{Name: "tls", Port: 15443}, {Name: "bad", Port: 0}}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}},
		}
	}
	for name, tc := range map[string]struct {
		svc  *corev1.Service
		want []model.Exposure
	}{
		"a labelled LoadBalancer's IPs and hostnames, then its externalIPs": {
			svc: lb(map[string]string{model.NetworkLabel: "net-b", model.GatewayPortLabel: "15443"},
				corev1.LoadBalancerIngress{IP: "198.51.100.7"}, corev1.LoadBalancerIngress{Hostname: "gw.example.com"}),
			want: []model.Exposure{{Cluster: "c", Network: "net-b", GatewayPort: "15443",
				Addresses: []string{"198.51.100.7", "gw.example.com", "203.0.113.9"}, Ports: []uint32{15443}}},
		},
		"a labelled Service without an address yet": {
			svc:  &corev1.Service{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{model.NetworkLabel: "net-b"}}},
			want: []model.Exposure{{Cluster: "c", Network: "net-b"}},
		},
		"an unlabelled ClusterIP Service": {
			svc: &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		},
		"an unlabelled NodePort Service with Istio's node selector, which registryServiceName may name: its nodes' external IPs": {
			svc: nodePortSvc(`{"gw": "yes"}`),
			want: []model.Exposure{{Cluster: "c", Addresses: []string{"198.51.100.1", "198.51.100.2"}, Ports: []uint32{15443, 15021},
				NodePort: true, NodePorts: []uint32{31443, 0}}},
		},
		"an empty node selector picks every node with an external IP, as Istio's": {
			svc: nodePortSvc(""),
			want: []model.Exposure{{Cluster: "c", Addresses: []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"}, Ports: []uint32{15443, 15021},
				NodePort: true, NodePorts: []uint32{31443, 0}}},
		},
		"a node selector that is not a JSON map picks none": {
			svc:  nodePortSvc(`gw=yes`),
			want: []model.Exposure{{Cluster: "c", Ports: []uint32{15443, 15021}, NodePort: true, NodePorts: []uint32{31443, 0}, NodeSelectorInvalid: true}},
		},
		"a NodePort gateway with externalIPs is at them, as Istio's": {
			svc: func() *corev1.Service {
				s := nodePortSvc(`{"gw": "yes"}`)
				s.Spec.ExternalIPs = []string{"203.0.113.5"}
				return s
			}(),
			want: []model.Exposure{{Cluster: "c", Addresses: []string{"203.0.113.5"}, Ports: []uint32{15443, 15021},
				NodePort: true, NodePorts: []uint32{31443, 0}}},
		},
		"an unlabelled NodePort Service without it": {
			svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 15443, NodePort: 31443}}}},
		},
		"the node selector on a LoadBalancer Service is not a NodePort gateway, as in Istio": {
			svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{model.NodeSelectorAnnotation: `{}`}},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 15443}}}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := exposuresOf(tc.svc, "c", testNodes); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("exposures %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExposedAddressesAreBounded(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for range 200 {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "192.0.2.1"})
	}
	if got := exposuresOf(svc, "c", testNodes); len(got) != 1 || len(got[0].Addresses) != maxExposedAddresses {
		t.Errorf("exposures %+v, want %d addresses", got, maxExposedAddresses)
	}
}

// testNodes are nodes as trimNode keeps them: two with external IPs
// labelled gw: yes, one with an external IP unlabelled, one without an
// external IP labelled gw: yes.
func testNodes() []*corev1.Node {
	node := func(name, ip string, labels map[string]string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.9"}}
		if ip != "" {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip})
		}
		return trimNode(n)
	}
	gw := map[string]string{"gw": "yes", "zone": "z1"}
	return []*corev1.Node{node("b", "198.51.100.2", gw), node("a", "198.51.100.1", gw), node("c", "198.51.100.3", nil), node("d", "", gw)}
}

// nodePortSvc is a NodePort Service with Istio's node selector.
func nodePortSvc(selector string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{model.NodeSelectorAnnotation: selector}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Port: 15443, NodePort: 31443}, {Port: 15021}}}}
}

// A node with an external IP keeps all its labels and that IP through
// trimNode; one without keeps its locality labels alone.
func TestTrimNodeKeepsWhatANodePortGatewayReads(t *testing.T) {
	nodes := testNodes()
	if got := nodes[0]; got.Labels["gw"] != "yes" || externalIP(got) != "198.51.100.2" || len(got.Status.Addresses) != 1 {
		t.Errorf("node with an external IP trimmed to %+v", got)
	}
	if got := nodes[3]; got.Labels != nil || len(got.Status.Addresses) != 0 {
		t.Errorf("node without an external IP trimmed to %+v", got)
	}
	if again := trimNode(nodes[0]); !sameNode(again, nodes[0]) || !reflect.DeepEqual(again, nodes[0]) {
		t.Errorf("trimNode is not idempotent: %+v", again)
	}
	moved := trimNode(&corev1.Node{ObjectMeta: nodes[0].ObjectMeta, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "198.51.100.9"}}}})
	if sameNode(moved, nodes[0]) {
		t.Error("a node whose external IP changed is the same node")
	}
}

// A node selector over its bound is refused without being parsed.
func TestAHugeNodeSelectorIsInvalid(t *testing.T) {
	huge := `{"a": "` + strings.Repeat("x", maxNodeSelector) + `"}`
	if addrs, invalid := nodeAddresses(huge, testNodes()); !invalid || addrs != nil {
		t.Errorf("nodeAddresses of %d bytes = %v, %v; want invalid", len(huge), addrs, invalid)
	}
}

// FuzzNodeAddresses: whatever a Service's node selector annotation holds,
// the addresses are sorted external IPs of the nodes, at most
// maxExposedAddresses, and none when it is invalid.
func FuzzNodeAddresses(f *testing.F) {
	for _, s := range []string{"", "{}", `{"gw": "yes"}`, `{"gw": 1}`, "null", "[]", `{"gw": "yes", "zone": "z1"}`, "{"} {
		f.Add(s)
	}
	nodes := testNodes()
	f.Fuzz(func(t *testing.T, selector string) {
		addrs, invalid := nodeAddresses(selector, nodes)
		if invalid && addrs != nil || len(addrs) > maxExposedAddresses || !slices.IsSorted(addrs) {
			t.Fatalf("nodeAddresses(%q) = %v, %v", selector, addrs, invalid)
		}
		for _, a := range addrs {
			if !slices.ContainsFunc(nodes, func(n *corev1.Node) bool { return externalIP(n) == a }) {
				t.Fatalf("address %q of no node", a)
			}
		}
	})
}
