package model

import (
	"cmp"
	"slices"

	securityv1 "istio.io/api/security/v1"
	betav1 "istio.io/api/security/v1beta1"
	betatypev1 "istio.io/api/type/v1beta1"
)

// MTLSMode is the effective PeerAuthentication mode of a workload port.
type MTLSMode int

// Modes, from least to most strict.
const (
	MTLSDisable MTLSMode = iota
	MTLSPermissive
	MTLSStrict
)

func (m MTLSMode) String() string {
	switch m {
	case MTLSDisable:
		return "DISABLE"
	case MTLSStrict:
		return "STRICT"
	default:
		return "PERMISSIVE"
	}
}

// MTLSMode is the effective PeerAuthentication mode for the workload of
// namespace and labels on port: a workload policy (selector matching, its
// port-level setting first) over the namespace policy over the mesh policy
// (root namespace, no selector); UNSET inherits; the default is PERMISSIVE.
// Among several policies of one level the oldest applies, as in Istio: the
// first created, then the first by name.
func (s *Snapshot) MTLSMode(namespace string, labels map[string]string, port uint32) MTLSMode {
	var workload, ns, mesh *PeerAuthentication
	for _, pa := range s.sortedPeerAuthentications() {
		hasSelector := len(pa.Spec.GetSelector().GetMatchLabels()) > 0
		switch {
		case pa.Namespace == namespace && hasSelector:
			if older(pa, workload) && Matches(pa.Spec.GetSelector().GetMatchLabels(), labels) {
				workload = pa
			}
		case pa.Namespace == namespace && !hasSelector:
			if older(pa, ns) {
				ns = pa
			}
		case pa.Namespace == s.Options.RootNamespace && !hasSelector:
			if older(pa, mesh) {
				mesh = pa
			}
		}
	}
	if workload != nil {
		if m := workload.Spec.GetPortLevelMtls()[port]; m != nil && m.GetMode() != betav1.PeerAuthentication_MutualTLS_UNSET {
			return fromPA(m.GetMode())
		}
	}
	for _, pa := range []*PeerAuthentication{workload, ns, mesh} {
		if pa == nil {
			continue
		}
		if m := pa.Spec.GetMtls().GetMode(); m != betav1.PeerAuthentication_MutualTLS_UNSET {
			return fromPA(m)
		}
	}
	return MTLSPermissive
}

// older reports whether a was created before b (or, created at the same
// second, is first by name), or b is nil.
func older(a, b *PeerAuthentication) bool {
	if b == nil {
		return true
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

func fromPA(m securityv1.PeerAuthentication_MutualTLS_Mode) MTLSMode {
	switch m {
	case betav1.PeerAuthentication_MutualTLS_DISABLE:
		return MTLSDisable
	case betav1.PeerAuthentication_MutualTLS_STRICT:
		return MTLSStrict
	default:
		return MTLSPermissive
	}
}

func (s *Snapshot) sortedPeerAuthentications() []*PeerAuthentication {
	return s.res.PeerAuthentications // sorted by Build's caller (FileSource sorts)
}

// AuthorizationPolicies returns the policies that apply to the workload of
// namespace and labels: those of its namespace and of the root namespace
// whose selector (if any) matches, sorted by namespace and name. A policy
// attached by targetRef(s) is for a gateway or waypoint, never a workload,
// as in Istio.
func (s *Snapshot) AuthorizationPolicies(namespace string, labels map[string]string) []*AuthorizationPolicy {
	return selectedPolicies(s, s.res.AuthorizationPolicies, namespace, labels,
		func(p *AuthorizationPolicy) (Meta, workloadSelected) { return p.Meta, p.Spec })
}

// RequestAuthentications returns the RequestAuthentications that apply to
// the workload of namespace and labels, chosen as AuthorizationPolicies
// are (Istio selects both alike).
func (s *Snapshot) RequestAuthentications(namespace string, labels map[string]string) []*RequestAuthentication {
	return selectedPolicies(s, s.res.RequestAuthentications, namespace, labels,
		func(p *RequestAuthentication) (Meta, workloadSelected) { return p.Meta, p.Spec })
}

// workloadSelected is a policy's spec as selection reads it.
type workloadSelected interface {
	GetTargetRef() *betatypev1.PolicyTargetReference
	GetTargetRefs() []*betatypev1.PolicyTargetReference
	GetSelector() *betatypev1.WorkloadSelector
}

// selectedPolicies returns those of all, of namespace or the root
// namespace, not attached by targetRef(s), whose selector (if any) matches
// labels, sorted by namespace and name.
func selectedPolicies[P any](s *Snapshot, all []P, namespace string, labels map[string]string, of func(P) (Meta, workloadSelected)) []P {
	var out []P
	for _, p := range all {
		if scopeOf(of(p)).Selects(s.Options.RootNamespace, namespace, labels) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b P) int {
		ma, _ := of(a)
		mb, _ := of(b)
		return cmp.Or(cmp.Compare(ma.Namespace, mb.Namespace), cmp.Compare(ma.Name, mb.Name))
	})
	return out
}

// PolicyScope is where an AuthorizationPolicy or RequestAuthentication
// applies.
type PolicyScope struct {
	Namespace string
	Selector  map[string]string
	Attached  bool // by targetRef(s): to a gateway or waypoint, never a workload
}

func scopeOf(meta Meta, spec workloadSelected) PolicyScope {
	return PolicyScope{
		Namespace: meta.Namespace, Selector: spec.GetSelector().GetMatchLabels(),
		Attached: spec.GetTargetRef() != nil || len(spec.GetTargetRefs()) > 0,
	}
}

// Selects reports whether the policy applies to the workload of namespace
// and labels, root being the mesh's root namespace: a policy of its
// namespace or of the root namespace, not attached by targetRef(s), whose
// selector (if any) matches.
func (p PolicyScope) Selects(root, namespace string, labels map[string]string) bool {
	return !p.Attached && (p.Namespace == namespace || p.Namespace == root) && Matches(p.Selector, labels)
}
