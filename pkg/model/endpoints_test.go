package model

import (
	"errors"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
)

func TestBuildKeepsGivenEndpointsAndAddsSelectedWorkloads(t *testing.T) {
	svc := &Service{
		Meta:     Meta{Name: "echo", Namespace: "app"},
		Selector: map[string]string{"app": "echo"},
		Ports:    []Port{{Name: "grpc", Port: 8080, TargetPort: 9000}},
		Endpoints: map[uint32][]Endpoint{8080: {
			{Address: "10.0.0.9", Port: 9000, ServiceAccount: "echo", Namespace: "app", Weight: 1},
			{Address: "10.0.0.3", Port: 9000, ServiceAccount: "echo", Namespace: "app", Weight: 1},
		}},
	}
	we := &Workload{Meta: Meta{Name: "vm", Namespace: "app"}, Spec: &networkingv1.WorkloadEntry{
		Address: "10.0.0.5", Labels: map[string]string{"app": "echo"},
	}}
	snap := Build("v1", Options{}, Resources{Services: []*Service{svc}, Workloads: []*Workload{we}})
	eps := snap.Service("echo.app.svc.cluster.local").Endpoints[8080]
	var got []string
	for _, e := range eps {
		got = append(got, e.Address)
	}
	if len(got) != 3 || got[0] != "10.0.0.3" || got[1] != "10.0.0.5" || got[2] != "10.0.0.9" {
		t.Fatalf("endpoints %v, want the given two and the workload, sorted", got)
	}
	if eps[1].ServiceAccount != "default" || eps[1].Port != 9000 {
		t.Errorf("workload endpoint %+v", eps[1])
	}
}

func TestRequestAuthenticationLoads(t *testing.T) {
	const ra = `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  jwtRules: [{issuer: "https://issuer.example", jwksUri: "https://issuer.example/jwks"}]
`
	snap, err := LoadDir(writeDir(t, map[string]string{"a.yaml": ra}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := snap.Resources().RequestAuthentications
	if len(got) != 1 || got[0].Name != "jwt" || got[0].Spec.GetJwtRules()[0].GetIssuer() != "https://issuer.example" {
		t.Fatalf("request authentications %+v", got)
	}
	_, err = LoadDir(writeDir(t, map[string]string{"a.yaml": ra + "  jwtRulez: []\n"}), Options{})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("an unknown field: err %v, want ErrInvalid", err)
	}
}
