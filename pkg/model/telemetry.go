package model

import (
	"google.golang.org/protobuf/proto"
	telemetryv1 "istio.io/api/telemetry/v1"
	"slices"
	"time"
)

// Telemetry is a telemetry.istio.io Telemetry: the metrics, access logs
// and tracing of the workloads it selects.
type Telemetry struct {
	Meta
	// Created is its creation time: of several Telemetries of one scope,
	// Istio takes the oldest first. Zero when the source has none.
	Created time.Time
	Spec    *telemetryv1.Telemetry
}

// Parts of a Telemetry count its creation time, which orders it among
// the others of its namespace.
func (t *Telemetry) Parts() (Meta, proto.Message) { return createdParts(t.Meta, t.Created), t.Spec }

// Telemetries returns the snapshot's Telemetries, sorted by namespace and
// name.
func (s *Snapshot) Telemetries() []*Telemetry { return s.res.Telemetries }

// TelemetryScope are the Telemetries that configure one sidecar, as Istio
// selects them (pilot/pkg/model/telemetry.go applicableTelemetries), in
// the order Istio merges them, the later overriding the earlier:
//   - Root: the mesh-wide one, the oldest Telemetry of the root namespace
//     with neither a selector nor targetRefs;
//   - Namespace: the oldest such Telemetry of the proxy's namespace, when
//     it is not the root namespace;
//   - Workload: every Telemetry of the proxy's namespace whose selector
//     has labels, all of them matching the workload's, oldest first.
//
// A Telemetry attached by targetRef(s) configures gateways and waypoints,
// never a sidecar.
type TelemetryScope struct {
	Root, Namespace *Telemetry
	Workload        []*Telemetry
}

// Empty reports whether no Telemetry applies.
func (sc TelemetryScope) Empty() bool {
	return sc.Root == nil && sc.Namespace == nil && len(sc.Workload) == 0
}

// All are the scope's Telemetries in merge order.
func (sc TelemetryScope) All() []*Telemetry {
	out := make([]*Telemetry, 0, 2+len(sc.Workload))
	for _, t := range []*Telemetry{sc.Root, sc.Namespace} {
		if t != nil {
			out = append(out, t)
		}
	}
	return append(out, sc.Workload...)
}

// Key names the scope's Telemetries: two proxies with equal keys have
// equal scopes within one snapshot. "" for an empty scope.
func (sc TelemetryScope) Key() string {
	if sc.Empty() {
		return ""
	}
	var b []byte
	for _, t := range sc.All() {
		b = append(append(append(append(b, t.Namespace...), '/'), t.Name...), ',')
	}
	return string(b)
}

// TelemetriesFor returns the Telemetries that configure the sidecar of
// namespace with labels. keep, when not nil, says which Telemetries may
// apply at all (those validation admits); the others are skipped as if
// absent.
func (s *Snapshot) TelemetriesFor(namespace string, labels map[string]string, keep func(*Telemetry) bool) TelemetryScope {
	var sc TelemetryScope
	if len(s.res.Telemetries) == 0 {
		return sc
	}
	root := s.Options.RootNamespace
	sc.Root = s.namespaceTelemetry(root, keep)
	if namespace != root {
		sc.Namespace = s.namespaceTelemetry(namespace, keep)
	}
	for _, t := range s.telemetriesOf(namespace, keep) {
		if len(t.Spec.GetSelector().GetMatchLabels()) == 0 || t.attached() {
			continue
		}
		if Matches(t.Spec.GetSelector().GetMatchLabels(), labels) {
			sc.Workload = append(sc.Workload, t)
		}
	}
	return sc
}

// namespaceTelemetry is the oldest Telemetry of namespace that selects
// the whole namespace.
func (s *Snapshot) namespaceTelemetry(namespace string, keep func(*Telemetry) bool) *Telemetry {
	for _, t := range s.telemetriesOf(namespace, keep) {
		if len(t.Spec.GetSelector().GetMatchLabels()) == 0 && !t.attached() {
			return t
		}
	}
	return nil
}

// attached: the Telemetry names its targets by reference.
func (t *Telemetry) attached() bool {
	return t.Spec.GetTargetRef() != nil || len(t.Spec.GetTargetRefs()) > 0
}

// telemetriesOf are the Telemetries of namespace that keep admits, in
// Istio's order: oldest first, then by name.
func (s *Snapshot) telemetriesOf(namespace string, keep func(*Telemetry) bool) []*Telemetry {
	all := s.res.Telemetries
	lo, _ := slices.BinarySearchFunc(all, namespace, func(t *Telemetry, ns string) int {
		if t.Namespace < ns {
			return -1
		}
		if t.Namespace > ns {
			return 1
		}
		return 0
	})
	var out []*Telemetry
	for i := lo; i < len(all) && all[i].Namespace == namespace; i++ {
		if keep == nil || keep(all[i]) {
			out = append(out, all[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *Telemetry) int { return compareCreated(a.Meta, a.Created, b.Meta, b.Created) })
	return out
}
