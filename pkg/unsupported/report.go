package unsupported

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Object is one object of which Bulwark ignores something.
type Object struct {
	Group     string   `json:"group"`
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name"`
	Ignored   []string `json:"ignored"`
}

// Report is what the reporter knows: the objects, and which kinds' CRDs
// it watches and which it still looks for.
type Report struct {
	Objects []Object `json:"objects"`
	// Watched are the CRDs watched, NotInstalled those the apiserver did
	// not serve when last asked.
	Watched      []string `json:"watched"`
	NotInstalled []string `json:"notInstalled"`
}

// Report lists every object Bulwark ignores something of, by group, kind,
// namespace and name.
func (r *Reporter) Report() Report {
	rep := Report{Objects: []Object{}, Watched: []string{}, NotInstalled: []string{}}
	for _, w := range r.watches() {
		rep.Watched = append(rep.Watched, w.kind.CRD())
		for _, obj := range w.informer.GetStore().List() {
			rec, ok := obj.(*record)
			if !ok || len(rec.ignored) == 0 {
				continue
			}
			rep.Objects = append(rep.Objects, Object{
				Group: w.kind.Group, Kind: w.kind.Name, Namespace: rec.Namespace, Name: rec.Name,
				Ignored: slices.Clone(rec.ignored),
			})
		}
	}
	r.mu.Lock()
	for _, k := range r.missing {
		rep.NotInstalled = append(rep.NotInstalled, k.CRD())
	}
	r.mu.Unlock()
	sortObjects(rep.Objects)
	slices.Sort(rep.Watched)
	slices.Sort(rep.NotInstalled)
	return rep
}

func sortObjects(objs []Object) {
	slices.SortFunc(objs, func(a, b Object) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// Handler serves Report as JSON: istiod's /debug/unsupported.
func (r *Reporter) Handler() http.Handler { return reportHandler(r.Report) }

func reportHandler(report func() Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report())
	})
}

var unsupportedDesc = prometheus.NewDesc("bulwark_unsupported_config",
	"Objects of which Bulwark ignores something (a kind it does not read, or fields it does not read), by group and kind; listed at /debug/unsupported.",
	[]string{"group", "kind"}, nil)

// Collector returns the gauge bulwark_unsupported_config{group,kind}: one
// series per kind watched, 0 when no object of it is ignored.
func (r *Reporter) Collector() prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		for _, w := range r.watches() {
			n := 0
			for _, obj := range w.informer.GetStore().List() {
				if rec, ok := obj.(*record); ok && len(rec.ignored) > 0 {
					n++
				}
			}
			ch <- prometheus.MustNewConstMetric(unsupportedDesc, prometheus.GaugeValue, float64(n), w.kind.Group, w.kind.Name)
		}
	})
}

// collectorFunc is the collector of bulwark_unsupported_config whose
// samples a function sends.
type collectorFunc func(ch chan<- prometheus.Metric)

func (collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- unsupportedDesc }

func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }
