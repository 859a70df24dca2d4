package kubesource

import (
	"crypto/sha256"
	"encoding/hex"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// reuse is what the last rebuild made, kept for the next: each kind's
// collection, changed only where events touched it, so that a pod moving
// costs its own conversion and its service's endpoints, not the whole
// cluster's. Run's goroutine alone uses it.
type reuse struct {
	built       bool
	opts        model.Options
	topo        topology // the source's cluster and network (SetNetwork)
	services    collection[*corev1.Service, *serviceEntry]
	serviceList []*model.Service // the entries' services, in order
	pods        collection[*corev1.Pod, *model.Pod]
	peerAuthn   collection[*securityv1.PeerAuthentication, *model.PeerAuthentication]
	authz       collection[*securityv1.AuthorizationPolicy, *model.AuthorizationPolicy]
	reqAuthn    collection[*securityv1.RequestAuthentication, *model.RequestAuthentication]
	destRules   collection[*networkingv1.DestinationRule, *model.DestinationRule]
	gateways    collection[*networkingv1.Gateway, *model.Gateway]
	virtualSvcs collection[*networkingv1.VirtualService, *model.VirtualService]
	svcEntries  collection[*networkingv1.ServiceEntry, *model.ServiceEntry]
	telemetries collection[*telemetryv1.Telemetry, *model.Telemetry]
	sidecars    collection[*networkingv1.Sidecar, *model.Sidecar]
	workloads   memo[*corev1.Pod, *workload] // what endpoints take from their pod
	last        *model.Snapshot              // the last rebuild's
}

// version hashes the kinds' digests: equal content gives an equal
// version, and any change a new one.
func (r *reuse) version() string {
	h := sha256.New()
	for _, d := range [][sha256.Size]byte{r.services.digest, r.pods.digest, r.peerAuthn.digest, r.authz.digest,
		r.reqAuthn.digest, r.destRules.digest, r.gateways.digest, r.virtualSvcs.digest, r.svcEntries.digest, r.telemetries.digest,
		r.sidecars.digest} {
		h.Write(d[:])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// memo maps the objects of one rebuild to what was made of them, keeping
// for the next rebuild only those the last one asked for.
type memo[K comparable, V any] struct {
	prev, next map[K]V
}

// get returns what was made of k, making it with make when the last
// rebuild did not.
func (m *memo[K, V]) get(k K, make func() V) V {
	if m.next == nil {
		m.next = map[K]V{}
	}
	if v, ok := m.next[k]; ok {
		return v
	}
	v, ok := m.prev[k]
	if !ok {
		v = make()
	}
	m.next[k] = v
	return v
}

func (m *memo[K, V]) done() {
	m.prev, m.next = m.next, nil
}
