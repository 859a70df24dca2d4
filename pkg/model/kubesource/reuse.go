package kubesource

import (
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// reuse keeps what one rebuild made of each cached object for the next,
// by the object's pointer: an informer replaces an object it updates and
// never changes it, so the same pointer is the same content. A rebuild
// then converts, copies and marshals only what changed since the last;
// a pod moving costs its own conversion, not the whole cluster's.
type reuse struct {
	services  memo[*corev1.Service, *model.Service] // without endpoints; copied per snapshot
	pods      memo[*corev1.Pod, *model.Pod]
	workloads memo[*corev1.Pod, *workload] // what endpoints take from their pod
	peerAuthn memo[*securityv1.PeerAuthentication, *model.PeerAuthentication]
	authz     memo[*securityv1.AuthorizationPolicy, *model.AuthorizationPolicy]
	reqAuthn  memo[*securityv1.RequestAuthentication, *model.RequestAuthentication]
	destRules memo[*networkingv1.DestinationRule, *model.DestinationRule]
	specs     memo[proto.Message, []byte] // the version hash's bytes of a spec made above
}

// done forgets what the rebuild that ends did not use: objects gone.
func (r *reuse) done() {
	r.services.done()
	r.pods.done()
	r.workloads.done()
	r.peerAuthn.done()
	r.authz.done()
	r.reqAuthn.done()
	r.destRules.done()
	r.specs.done()
}

// specBytes is spec as the version hashes it: deterministic marshalling,
// stable within a process, which is all a version needs; a message that
// does not marshal (invalid UTF-8) in its text form.
func (r *reuse) specBytes(spec proto.Message) []byte {
	return r.specs.get(spec, func() []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
		if err != nil {
			b = []byte("text:" + prototext.Format(spec))
		}
		return b
	})
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
