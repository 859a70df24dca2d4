package report

import (
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// reportTelemetries logs, once each, the Telemetries validation refuses
// (bulwark_policy_fail_closed, kind Telemetry, reason refused: the
// proxies they select keep the telemetry of the rest), and what of the
// mesh config's providers and of the Telemetries' providers Envoy
// proxies are not given (a provider that is not defined, or of a type
// not generated). Fields Bulwark ignores whole (tracing, targetRefs) are
// the unsupported-config reporter's.
func (s *scan) reportTelemetries(snap *model.Snapshot, closed failClosed, current map[string]bool) {
	g := s.mesh.Envoy
	say := func(msg string, args ...any) {
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn(msg, args...)
		}
	}
	for _, note := range g.Telemetry.Notes() {
		say("mesh telemetry provider not generated: "+note, "problem", note)
	}
	for _, tel := range snap.Telemetries() {
		name := tel.Namespace + "/" + tel.Name
		if f := policy.ValidateTelemetry(tel.Spec); !f.OK() {
			closed.add("Telemetry", "refused")
			problem := strings.Join(f.Errors, "; ")
			say("telemetry refused: "+name+": "+problem, "telemetry", name, "problem", problem)
			continue
		}
		t, err := g.Telemetry.ForScope(model.TelemetryScope{Workload: []*model.Telemetry{tel}})
		if err != nil {
			closed.add("Telemetry", "refused")
			say("telemetry refused: "+name+": "+err.Error(), "telemetry", name, "problem", err.Error())
			continue
		}
		for _, note := range t.Notes() {
			if !strings.Contains(note, "is not among") && !strings.Contains(note, "is not generated") {
				continue
			}
			say("telemetry not applied as written: "+name+": "+note, "telemetry", name, "problem", note)
		}
	}
}
