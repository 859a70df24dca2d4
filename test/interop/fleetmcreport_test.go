package interop

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// mcMetric is one row of the multi-cluster table, and one metric reported
// per control plane.
type mcMetric struct {
	label, unit, phase string
	get                func(*mcRound) float64
}

// mcGoal is the goal for an endpoint move in a remote cluster.
const mcGoal = time.Second

func msIn(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// mcRemoteP99 is the row the goal is about.
var mcRemoteP99 = mcMetric{"remote endpoint move, p99 (ms)", "remote-move-p99-ms", phaseRemoteMove,
	func(r *mcRound) float64 { return msIn(r.remote.p99) }}

// mcMetrics are the rows for a mesh of the given number of remotes.
func mcMetrics(remotes int) []mcMetric {
	var out []mcMetric
	for k := range remotes {
		out = append(out, mcMetric{fmt.Sprintf("remote %d registered: secret to synced (s)", k+1),
			fmt.Sprintf("sync%d-s", k+1), phaseRemotes, func(r *mcRound) float64 { return r.synced[k].Seconds() }})
	}
	for k := range remotes + 1 {
		out = append(out,
			mcMetric{fmt.Sprintf("live heap, %d remotes, no proxy (MiB)", k), fmt.Sprintf("heap%d-MiB", k), phaseRemotes,
				func(r *mcRound) float64 { return float64(r.heap[k]) / (1 << 20) }},
			mcMetric{fmt.Sprintf("RSS, %d remotes, no proxy (MiB)", k), fmt.Sprintf("rss%d-MiB", k), phaseRemotes,
				func(r *mcRound) float64 { return float64(r.rss[k]) / (1 << 20) }})
	}
	perRemote := func(v []int64) float64 { return float64(v[remotes]-v[0]) / float64(remotes) / (1 << 20) }
	return append(out,
		mcMetric{"live heap per remote cluster (MiB)", "heap-MiB/remote", phaseRemotes, func(r *mcRound) float64 { return perRemote(r.heap) }},
		mcMetric{"RSS per remote cluster (MiB)", "rss-MiB/remote", phaseRemotes, func(r *mcRound) float64 { return perRemote(r.rss) }},
		mcMetric{"initial config, whole fleet (s)", "initial-s", phaseInitial, func(r *mcRound) float64 { return r.fleet.initAll.Seconds() }},
		mcMetric{"initial config per proxy, p99 (ms)", "initial-p99-ms", phaseInitial, func(r *mcRound) float64 { return msIn(r.fleet.initP99) }},
		mcMetric{"control plane CPU for it (s)", "init-cpu-s", phaseInitial, func(r *mcRound) float64 { return r.fleet.initCPU.Seconds() }},
		mcMetric{"live heap per proxy (KiB)", "heap-KiB/proxy", phaseInitial, func(r *mcRound) float64 { return r.fleet.heapKiB }},
		mcMetric{"remote endpoint move, p50 (ms)", "remote-move-p50-ms", phaseRemoteMove, func(r *mcRound) float64 { return msIn(r.remote.p50) }},
		mcRemoteP99,
		mcMetric{"remote endpoint move, max (ms)", "remote-move-max-ms", phaseRemoteMove, func(r *mcRound) float64 { return msIn(r.remote.max) }},
		mcMetric{"remote endpoint move, proxies sent anything", "remote-move-sent", phaseRemoteMove, func(r *mcRound) float64 { return float64(r.remote.sent) }},
		mcMetric{"remote endpoint move, control plane CPU (ms)", "remote-move-cpu-ms", phaseRemoteMove, func(r *mcRound) float64 { return msIn(r.remote.cpu) }},
		mcMetric{"local endpoint move, p50 (ms)", "local-move-p50-ms", phaseMove, func(r *mcRound) float64 { return msIn(r.local.p50) }},
		mcMetric{"local endpoint move, p99 (ms)", "local-move-p99-ms", phaseMove, func(r *mcRound) float64 { return msIn(r.local.p99) }},
		mcMetric{"local endpoint move, max (ms)", "local-move-max-ms", phaseMove, func(r *mcRound) float64 { return msIn(r.local.max) }},
		mcMetric{"local endpoint move, proxies sent anything", "local-move-sent", phaseMove, func(r *mcRound) float64 { return float64(r.local.sent) }},
		mcMetric{"local endpoint move, control plane CPU (ms)", "local-move-cpu-ms", phaseMove, func(r *mcRound) float64 { return msIn(r.local.cpu) }},
	)
}

// medianOf is the median of m over the rounds whose phase completed, NaN
// if none did.
func (m mcMetric) medianOf(rounds []*mcRound) float64 {
	var v []float64
	for _, r := range rounds {
		if !r.fleet.failed[m.phase] {
			v = append(v, m.get(r))
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	return median(v)
}

// reportMC prints the table of medians with the goal, reports them as
// each control plane's metrics, and compares the sample proxies' clusters
// and endpoints of the two control planes.
func reportMC(b *testing.B, size fleetSize, mc *fleetMC, kinds []string, results map[string][]*mcRound) {
	var out strings.Builder
	fmt.Fprintf(&out, "\nMulti-cluster fleet benchmark: %d clusters × %d services (2 pods each, same names in every cluster), %d Envoy sidecars in the primary; median of %d round(s)\n",
		1+len(mc.remotes), size.services, size.proxies, size.rounds)
	w := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	pair := slices.Contains(kinds, fleetIstio) && slices.Contains(kinds, fleetBulwark)
	header := append([]string{fmt.Sprintf("%-46s", "")}, kinds...)
	if pair {
		header = append(header, "bulwark/istio")
	}
	fmt.Fprintln(w, strings.Join(header, "\t")+"\t")
	metrics := mcMetrics(len(mc.remotes))
	for _, m := range metrics {
		row := []string{fmt.Sprintf("%-46s", m.label)} // left-aligned
		for _, k := range kinds {
			row = append(row, fleetNumber(m.medianOf(results[k])))
		}
		if pair {
			row = append(row, fleetRatio(m.medianOf(results[fleetBulwark]), m.medianOf(results[fleetIstio])))
		}
		fmt.Fprintln(w, strings.Join(row, "\t")+"\t")
	}
	_ = w.Flush()
	for _, k := range kinds {
		p99 := mcRemoteP99.medianOf(results[k])
		verdict := "met"
		if math.IsNaN(p99) || p99 >= msIn(mcGoal) {
			verdict = "NOT met"
		}
		fmt.Fprintf(&out, "goal, remote endpoint move p99 < %s: %s by %s (%s ms)\n", mcGoal, verdict, k, fleetNumber(p99))
	}
	if pair {
		fleets := func(rounds []*mcRound) []*fleetRound {
			var out []*fleetRound
			for _, r := range rounds {
				out = append(out, r.fleet)
			}
			return out
		}
		out.WriteString(compareFleetSamples(b, fleets(results[fleetIstio]), fleets(results[fleetBulwark])))
	}
	benchNote("%s", out.String())
	reportPerControlPlane(b, kinds, len(metrics), func(kind string, i int) (float64, string) {
		return metrics[i].medianOf(results[kind]), metrics[i].unit
	})
}
