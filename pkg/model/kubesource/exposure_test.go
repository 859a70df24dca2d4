package kubesource

import (
	"reflect"
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
		"an unlabelled NodePort Service with Istio's node selector, which registryServiceName may name": {
			svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{model.NodeSelectorAnnotation: `{"gw": "yes"}`}},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 15443, NodePort: 31443}}}},
			want: []model.Exposure{{Cluster: "c", Ports: []uint32{15443}, NodePort: true}},
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
			if got := exposuresOf(tc.svc, "c"); !reflect.DeepEqual(got, tc.want) {
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
	if got := exposuresOf(svc, "c"); len(got) != 1 || len(got[0].Addresses) != maxExposedAddresses {
		t.Errorf("exposures %+v, want %d addresses", got, maxExposedAddresses)
	}
}
