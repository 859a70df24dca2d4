package interop

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// fleetMetric is one row of the benchmark's table, and one metric
// reported per control plane.
type fleetMetric struct {
	label string
	unit  string // b.ReportMetric's unit
	phase string
	get   func(*fleetRound) float64
}

func msOf(f func(*fleetRound) time.Duration) func(*fleetRound) float64 {
	return func(r *fleetRound) float64 { return float64(f(r).Microseconds()) / 1000 }
}

var fleetMetrics = []fleetMetric{
	{"initial config, whole fleet (s)", "initial-s", phaseInitial, func(r *fleetRound) float64 { return r.initAll.Seconds() }},
	{"initial config per proxy, p50 (ms)", "initial-p50-ms", phaseInitial, msOf(func(r *fleetRound) time.Duration { return r.initP50 })},
	{"initial config per proxy, p99 (ms)", "initial-p99-ms", phaseInitial, msOf(func(r *fleetRound) time.Duration { return r.initP99 })},
	{"received per proxy for it (KiB)", "init-KiB/proxy", phaseInitial, func(r *fleetRound) float64 { return r.initKiB }},
	{"control plane CPU for it (s)", "init-cpu-s", phaseInitial, func(r *fleetRound) float64 { return r.initCPU.Seconds() }},
	{"fleet's own CPU for it (s)", "fleet-cpu-s", phaseInitial, func(r *fleetRound) float64 { return r.initFleetCPU.Seconds() }},
	{"streams refused while connecting", "refused-streams", phaseInitial, func(r *fleetRound) float64 { return float64(r.refused) }},
	{"live heap per proxy (KiB)", "heap-KiB/proxy", phaseInitial, func(r *fleetRound) float64 { return r.heapKiB }},
	{"RSS per proxy (KiB)", "rss-KiB/proxy", phaseInitial, func(r *fleetRound) float64 { return r.rssKiB }},
	{"live heap per service, no proxy (KiB)", "heap-KiB/service", phaseInitial, func(r *fleetRound) float64 { return r.heapPerServiceKiB }},
	{"endpoint move, p50 (ms)", "move-p50-ms", phaseMove, msOf(func(r *fleetRound) time.Duration { return r.moveP50 })},
	{"endpoint move, p99 (ms)", "move-p99-ms", phaseMove, msOf(func(r *fleetRound) time.Duration { return r.moveP99 })},
	{"endpoint move, max (ms)", "move-max-ms", phaseMove, msOf(func(r *fleetRound) time.Duration { return r.moveMax })},
	{"endpoint move, control plane CPU (ms)", "move-cpu-ms", phaseMove, msOf(func(r *fleetRound) time.Duration { return r.moveCPU })},
	{"burst of 50 over 1 s, all converged (ms)", "burst-ms", phaseBurst, msOf(func(r *fleetRound) time.Duration { return r.burstAll })},
	{"burst, control plane CPU (ms)", "burst-cpu-ms", phaseBurst, msOf(func(r *fleetRound) time.Duration { return r.burstCPU })},
	{"new service: cluster, p99 (ms)", "newsvc-cluster-p99-ms", phaseNewSvc, msOf(func(r *fleetRound) time.Duration { return r.newClusterP99 })},
	{"new service: endpoints, p99 (ms)", "newsvc-eds-p99-ms", phaseNewSvc, msOf(func(r *fleetRound) time.Duration { return r.newEDSP99 })},
	{"new service: route before endpoints, max (ms)", "newsvc-gap-ms", phaseNewSvc, msOf(func(r *fleetRound) time.Duration { return r.newGap })},
	{"new service, control plane CPU (ms)", "newsvc-cpu-ms", phaseNewSvc, msOf(func(r *fleetRound) time.Duration { return r.newCPU })},
	{"policy change, affected proxies p99 (ms)", "policy-p99-ms", phasePolicy, msOf(func(r *fleetRound) time.Duration { return r.policyP99 })},
	{"policy change, proxies sent listeners", "policy-lds-proxies", phasePolicy, func(r *fleetRound) float64 { return float64(r.policyPushed) }},
	{"policy change, control plane CPU (ms)", "policy-cpu-ms", phasePolicy, msOf(func(r *fleetRound) time.Duration { return r.policyCPU })},
	{"VirtualService change, its namespace's p99 (ms)", "vs-p99-ms", phaseVS, msOf(func(r *fleetRound) time.Duration { return r.vsP99 })},
	{"VirtualService change, proxies that see it", "vs-affected-proxies", phaseVS, func(r *fleetRound) float64 { return float64(r.vsAffected) }},
	{"VirtualService change, proxies sent anything", "vs-pushed-proxies", phaseVS, func(r *fleetRound) float64 { return float64(r.vsPushed) }},
	{"VirtualService change, control plane CPU (ms)", "vs-cpu-ms", phaseVS, msOf(func(r *fleetRound) time.Duration { return r.vsCPU })},
	{"mesh-wide VirtualService change, p99 (ms)", "vs-mesh-p99-ms", phaseMeshVS, msOf(func(r *fleetRound) time.Duration { return r.meshVSP99 })},
	{"mesh-wide VirtualService, proxies that see it", "vs-mesh-affected-proxies", phaseMeshVS, func(r *fleetRound) float64 { return float64(r.meshVSAffected) }},
	{"mesh-wide VirtualService, proxies sent anything", "vs-mesh-pushed-proxies", phaseMeshVS, func(r *fleetRound) float64 { return float64(r.meshVSPushed) }},
	{"mesh-wide VirtualService, control plane CPU (ms)", "vs-mesh-cpu-ms", phaseMeshVS, msOf(func(r *fleetRound) time.Duration { return r.meshVSCPU })},
	{"DestinationRule subset added, p99 (ms)", "dr-p99-ms", phaseDR, msOf(func(r *fleetRound) time.Duration { return r.drP99 })},
	{"DestinationRule change, proxies sent anything", "dr-pushed-proxies", phaseDR, func(r *fleetRound) float64 { return float64(r.drPushed) }},
	{"DestinationRule change, control plane CPU (ms)", "dr-cpu-ms", phaseDR, msOf(func(r *fleetRound) time.Duration { return r.drCPU })},
	{"fleet's own CPU over the changes (s)", "fleet-change-cpu-s", phasePolicy, func(r *fleetRound) float64 { return r.changeFleetCPU.Seconds() }},
}

// medianOf is the median of m over the rounds whose phase completed, NaN
// if none did.
func (m fleetMetric) medianOf(rounds []*fleetRound) float64 {
	var v []float64
	for _, r := range rounds {
		if !r.failed[m.phase] {
			v = append(v, m.get(r))
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	return median(v)
}

// reportFleet prints the table of medians, reports them as each control
// plane's metrics, and compares the sample proxies' clusters.
func reportFleet(b *testing.B, size fleetSize, kinds []string, results map[string][]*fleetRound) {
	var t strings.Builder
	fmt.Fprintf(&t, "\nFleet benchmark, %d services (2 pods each), %d Envoy sidecars, STRICT mTLS, one AuthorizationPolicy per service; median of %d rounds\n",
		size.services, size.proxies, size.rounds)
	fmt.Fprintf(&t, "%-46s", "")
	for _, k := range kinds {
		fmt.Fprintf(&t, " %12s", k)
	}
	pair := slices.Contains(kinds, fleetIstio) && slices.Contains(kinds, fleetBulwark)
	if pair {
		fmt.Fprintf(&t, " %14s", "bulwark/istio")
	}
	t.WriteString("\n")
	for _, m := range fleetMetrics {
		fmt.Fprintf(&t, "%-46s", m.label)
		for _, k := range kinds {
			fmt.Fprintf(&t, " %12s", fleetNumber(m.medianOf(results[k])))
		}
		if pair {
			fmt.Fprintf(&t, " %14s", fleetRatio(m.medianOf(results[fleetBulwark]), m.medianOf(results[fleetIstio])))
		}
		t.WriteString("\n")
	}
	if pair {
		t.WriteString(compareFleetSamples(b, results[fleetIstio], results[fleetBulwark]))
	}
	benchNote("%s", t.String())
	reportPerControlPlane(b, kinds, len(fleetMetrics), func(kind string, i int) (float64, string) {
		return fleetMetrics[i].medianOf(results[kind]), fleetMetrics[i].unit
	})
}

// reportPerControlPlane reports, in a sub-benchmark of each control plane,
// its n metrics: metric i's value (NaN: left out) and unit.
func reportPerControlPlane(b *testing.B, kinds []string, n int, metric func(kind string, i int) (float64, string)) {
	for _, k := range kinds {
		b.Run("cp="+k, func(b *testing.B) {
			for i := range n {
				if v, unit := metric(k, i); !math.IsNaN(v) {
					b.ReportMetric(v, unit)
				}
			}
		})
	}
}

func fleetNumber(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v == math.Trunc(v) && math.Abs(v) < 1e6:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fleetRatio(bulwark, istio float64) string {
	if math.IsNaN(bulwark) || math.IsNaN(istio) || istio == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", bulwark/istio)
}

// compareFleetSamples compares, for the sample proxies of each control
// plane's first complete round, the cluster names and each EDS cluster's
// endpoints. Names Istio alone gives, or Bulwark alone, are reported; an
// outbound EDS cluster of a service (outbound|<port>||<host>) missing on
// either side, or with other endpoints, fails the benchmark.
func compareFleetSamples(b *testing.B, istio, bulwark []*fleetRound) string {
	first := func(rounds []*fleetRound) map[string]proxySnapshot {
		for _, r := range rounds {
			if !r.failed[phaseInitial] {
				return r.samples
			}
		}
		return nil
	}
	is, bs := first(istio), first(bulwark)
	if is == nil || bs == nil {
		return "\nSample proxies not compared (no complete initial config on one side)\n"
	}
	var out strings.Builder
	out.WriteString("\nSample proxies, Istio against Bulwark:\n")
	for _, pod := range slices.Sorted(maps.Keys(is)) {
		i, bw := is[pod], bs[pod]
		onlyI, onlyB := setDiff(i.clusters, bw.clusters), setDiff(bw.clusters, i.clusters)
		fmt.Fprintf(&out, "  %s: %d clusters from Istio, %d from Bulwark\n", pod, len(i.clusters), len(bw.clusters))
		if len(onlyI) > 0 {
			fmt.Fprintf(&out, "    only from Istio: %s\n", strings.Join(onlyI, ", "))
		}
		if len(onlyB) > 0 {
			fmt.Fprintf(&out, "    only from Bulwark: %s\n", strings.Join(onlyB, ", "))
		}
		for _, name := range append(onlyI, onlyB...) {
			if isServiceEDS(name, i, bw) {
				b.Errorf("%s: outbound EDS cluster %s is not given by both control planes", pod, name)
			}
		}
		for name, ie := range i.endpoints {
			be, ok := bw.endpoints[name]
			if !ok {
				continue
			}
			if !slices.Equal(ie, be) {
				fmt.Fprintf(&out, "    %s: endpoints %v from Istio, %v from Bulwark\n", name, ie, be)
				if strings.HasPrefix(name, "outbound|") {
					b.Errorf("%s: outbound cluster %s: endpoints %v from Istio, %v from Bulwark", pod, name, ie, be)
				}
			}
		}
	}
	return out.String()
}

// isServiceEDS reports whether name is an outbound EDS cluster
// (outbound|<port>||<host>) on the side that has it.
func isServiceEDS(name string, a, b proxySnapshot) bool {
	_, inA := a.endpoints[name]
	_, inB := b.endpoints[name]
	parts := strings.Split(name, "|")
	return (inA || inB) && len(parts) == 4 && parts[0] == "outbound" && parts[2] == ""
}

func setDiff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if _, found := slices.BinarySearch(b, s); !found {
			out = append(out, s)
		}
	}
	return out
}
