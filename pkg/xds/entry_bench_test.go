package xds

import (
	"fmt"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// withEntries is snap with n ServiceEntries beside its services: a third
// DNS with an HTTP port, a third STATIC with an address and a TCP port and
// two endpoints, a third TLS without address chosen by SNI.
func withEntries(snap *model.Snapshot, n int) *model.Snapshot {
	res := *snap.Resources()
	res.ServiceEntries = nil
	for i := range n {
		spec := &networkingv1.ServiceEntry{Hosts: []string{fmt.Sprintf("e%d.example.com", i)}, Location: networkingv1.ServiceEntry_MESH_EXTERNAL}
		switch i % 3 {
		case 0:
			spec.Resolution = networkingv1.ServiceEntry_DNS
			spec.Ports = []*networkingv1.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}
		case 1:
			spec.Resolution = networkingv1.ServiceEntry_STATIC
			spec.Addresses = []string{fmt.Sprintf("240.0.%d.%d", i/250, i%250+1)}
			spec.Ports = []*networkingv1.ServicePort{{Number: 5432, Name: "tcp", Protocol: "TCP"}}
			spec.Endpoints = []*networkingv1.WorkloadEntry{{Address: fmt.Sprintf("192.0.%d.1", i%250)}, {Address: fmt.Sprintf("192.0.%d.2", i%250)}}
		case 2:
			spec.Resolution = networkingv1.ServiceEntry_DNS
			spec.Ports = []*networkingv1.ServicePort{{Number: 443, Name: "tls", Protocol: "TLS"}}
		}
		res.ServiceEntries = append(res.ServiceEntries, &model.ServiceEntry{Meta: model.Meta{Name: fmt.Sprintf("e%d", i), Namespace: "bench"}, Spec: spec})
	}
	return model.BuildShared(fmt.Sprintf("%s+entries-%d", snap.Version, n), snap.Options, res, nil)
}

// BenchmarkSidecarPushWithServiceEntries is BenchmarkSidecarPush's first
// push for 1,000 services, without and with 100 ServiceEntries.
func BenchmarkSidecarPushWithServiceEntries(b *testing.B) {
	base := sidecarBenchModel(b, 1000)
	srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		b.Fatal(err)
	}
	first := benchWorkload(b, "svc-0-0", "10.1.0.1")
	for _, entries := range []int{0, 100} {
		snap := base
		if entries > 0 {
			snap = withEntries(base, entries)
		}
		b.Run(fmt.Sprintf("services=1000/entries=%d", entries), func(b *testing.B) {
			for range b.N {
				pushAllTypes(b, srv, newPushState(snap, time.Time{}), first)
			}
		})
	}
}
