package unsupported

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported/unsupportedtest"
)

const (
	networking = "networking.istio.io"
	security   = "security.istio.io"
	gatewayAPI = "gateway.networking.k8s.io"
)

// TestEachObjectIsLoggedOncePerChange: an object of which something is
// ignored is logged when it appears and again when its spec or what is
// ignored of it changes, never for a label, a status write or a resync;
// one honoured whole is never logged.
func TestEachObjectIsLoggedOncePerChange(t *testing.T) {
	c := startCluster(t)
	ns := c.env.Namespace(t)
	_, rec := c.reporter(t, nil)
	ef, dr := kind(t, networking, "EnvoyFilter"), kind(t, networking, "DestinationRule")
	lines := func(name string, parts ...string) int {
		return rec.Count(append([]string{Message, "object=" + ns + "/" + name}, parts...)...)
	}
	// synced waits for the line of a new EnvoyFilter: what the informer
	// was told before it has been handled.
	n := 0
	synced := func() {
		t.Helper()
		n++
		name := "sync-" + string(rune('a'+n))
		c.create(t, ef, ns, name, map[string]any{})
		waitFor(t, "the line of "+name, func() bool { return lines(name) == 1 })
	}

	filter := c.create(t, ef, ns, "add-header", map[string]any{"configPatches": []any{}})
	waitFor(t, "the EnvoyFilter logged", func() bool {
		return lines("add-header", "kind=EnvoyFilter", "group=networking.istio.io", "the whole object") == 1
	})
	filter = c.update(t, ef, filter, func(u *unstructured.Unstructured) {
		u.Object["spec"] = map[string]any{"priority": int64(1)}
	})
	waitFor(t, "the changed EnvoyFilter logged again", func() bool { return lines("add-header") == 2 })
	filter = c.update(t, ef, filter, func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "a"}) })
	filter.Object["status"] = map[string]any{"note": "written by a controller"}
	if _, err := c.resource(ef).Namespace(ns).UpdateStatus(context.Background(), filter, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	synced()
	if got := lines("add-header"); got != 2 {
		t.Errorf("a label and a status write logged the EnvoyFilter again: %d lines, want 2", got)
	}
	if err := c.resource(ef).Namespace(ns).Delete(context.Background(), "add-header", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the EnvoyFilter's deletion logged", func() bool {
		return rec.Count("Istio configuration not honoured is gone", "object="+ns+"/add-header") == 1
	})

	rule := c.create(t, dr, ns, "reviews", map[string]any{
		"host": "reviews", "trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": "LEAST_REQUEST"}},
	})
	waitFor(t, "the DestinationRule's load balancer logged", func() bool {
		return lines("reviews", "spec.trafficPolicy.loadBalancer: ignored") == 1
	})
	rule = c.update(t, dr, rule, func(u *unstructured.Unstructured) {
		u.Object["spec"] = map[string]any{"host": "reviews", "trafficPolicy": map[string]any{"outlierDetection": map[string]any{}}}
	})
	waitFor(t, "the DestinationRule's outlier detection logged", func() bool {
		return lines("reviews", "spec.trafficPolicy.outlierDetection: ignored") == 1
	})
	c.update(t, dr, rule, func(u *unstructured.Unstructured) {
		u.Object["spec"] = map[string]any{"host": "reviews", "trafficPolicy": map[string]any{"tls": map[string]any{"mode": "ISTIO_MUTUAL"}}}
	})
	waitFor(t, "the DestinationRule honoured in full", func() bool {
		return rec.Count("now honoured in full", "object="+ns+"/reviews") == 1
	})
	c.create(t, dr, ns, "tls-only", map[string]any{"host": "ratings", "trafficPolicy": map[string]any{"tls": map[string]any{"mode": "DISABLE"}}})
	synced()
	if got := lines("reviews"); got != 2 {
		t.Errorf("DestinationRule reviews: %d lines, want 2", got)
	}
	if got := rec.Count("object=" + ns + "/tls-only"); got != 0 {
		t.Errorf("a DestinationRule honoured whole was logged %d times", got)
	}
}

// TestReportGaugeAndDebugList: the report lists, by kind, every object of
// which something is ignored, at whichever version its CRD is served,
// and no other; the gauge counts them per kind, with a series for every
// kind watched; the debug handler serves the same list.
func TestReportGaugeAndDebugList(t *testing.T) {
	c := startCluster(t)
	ns := c.env.Namespace(t)
	r, _ := c.reporter(t, nil)
	c.create(t, kind(t, networking, "EnvoyFilter"), ns, "ef", map[string]any{})
	c.create(t, kind(t, networking, "VirtualService"), ns, "vs", map[string]any{ // a tcp match's sourceSubnet, which nothing reads
		"hosts": []any{"a"}, "tcp": []any{map[string]any{
			"match": []any{map[string]any{"sourceSubnet": "10.0.0.0/8"}},
			"route": []any{map[string]any{"destination": map[string]any{"host": "a"}}},
		}},
	})
	c.create(t, kind(t, "telemetry.istio.io", "Telemetry"), ns, "tel", map[string]any{"tracing": []any{map[string]any{}}}) // not generated
	c.create(t, kind(t, "telemetry.istio.io", "Telemetry"), ns, "logs", map[string]any{"accessLogging": []any{map[string]any{}}})
	c.create(t, kind(t, gatewayAPI, "HTTPRoute"), ns, "route", map[string]any{})
	c.create(t, kind(t, gatewayAPI, "TCPRoute"), ns, "tcp", map[string]any{})
	c.create(t, kind(t, gatewayAPI, "Gateway"), ns, "gw", map[string]any{"gatewayClassName": "x"})
	c.create(t, kind(t, security, "AuthorizationPolicy"), ns, "by-ref", map[string]any{
		"targetRef": map[string]any{"kind": "Gateway", "name": "gw"}, "rules": []any{map[string]any{}},
	})
	c.create(t, kind(t, security, "AuthorizationPolicy"), ns, "by-selector", map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "a"}}, "rules": []any{map[string]any{}},
	})
	c.create(t, kind(t, security, "PeerAuthentication"), ns, "strict", map[string]any{"mtls": map[string]any{"mode": "STRICT"}})
	want := []string{
		"AuthorizationPolicy.security.istio.io/by-ref",
		"EnvoyFilter.networking.istio.io/ef",
		"Gateway.gateway.networking.k8s.io/gw",
		"HTTPRoute.gateway.networking.k8s.io/route",
		"TCPRoute.gateway.networking.k8s.io/tcp",
		"Telemetry.telemetry.istio.io/tel",
		"VirtualService.networking.istio.io/vs",
	}
	names := func(rep Report) []string {
		var out []string
		for _, o := range inNamespace(rep, ns) {
			out = append(out, o.Kind+"."+o.Group+"/"+o.Name)
		}
		slices.Sort(out)
		return out
	}
	waitFor(t, "the report of the namespace", func() bool { return slices.Equal(names(r.Report()), want) })
	rep := r.Report()
	if len(rep.NotInstalled) != 0 {
		t.Errorf("CRDs not installed: %v", rep.NotInstalled)
	}
	if slices.Contains(rep.Watched, "peerauthentications.security.istio.io") {
		t.Error("PeerAuthentication, honoured whole, is watched")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector())
	families, err := reg.Gather()
	if err != nil || len(families) != 1 {
		t.Fatalf("gather: %d families, %v", len(families), err)
	}
	perKind := map[string]int{}
	for _, o := range rep.Objects {
		perKind[o.Kind+"."+o.Group]++
	}
	series := families[0].GetMetric()
	if families[0].GetName() != "bulwark_unsupported_config" || len(series) != len(policy.Reported()) {
		t.Fatalf("%s: %d series, want one per kind watched (%d)", families[0].GetName(), len(series), len(policy.Reported()))
	}
	for _, m := range series {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		k := labels["kind"] + "." + labels["group"]
		if got := int(m.GetGauge().GetValue()); got != perKind[k] {
			t.Errorf("bulwark_unsupported_config{%s} = %d, the report lists %d", k, got, perKind[k])
		}
	}

	w := httptest.NewRecorder()
	r.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/debug/unsupported", nil))
	var served Report
	if err := json.Unmarshal(w.Body.Bytes(), &served); err != nil {
		t.Fatalf("/debug/unsupported: %v: %s", err, w.Body.String())
	}
	if got := names(served); !slices.Equal(got, want) {
		t.Errorf("/debug/unsupported lists %v, want %v", got, want)
	}
	for _, o := range inNamespace(served, ns) {
		if len(o.Ignored) == 0 || (o.Name == "by-ref" && !strings.Contains(o.Ignored[0], "spec.targetRef")) {
			t.Errorf("%s %s: ignored %q", o.Kind, o.Name, o.Ignored)
		}
	}
}

// TestAKindInstalledLaterIsWatched: a kind whose CRD is not installed is
// not watched, named as not installed, and looked for again; once its CRD
// is installed its objects are reported.
func TestAKindInstalledLaterIsWatched(t *testing.T) {
	c := startCluster(t)
	ns := c.env.Namespace(t)
	late := kind(t, networking, "EnvoyFilter")
	late.Group, late.Resource, late.Name = ns+".bulwark.test", "latefilters", "LateFilter"
	r, rec := c.reporter(t, []policy.Kind{kind(t, networking, "Sidecar"), late})
	if rep := r.Report(); !slices.Equal(rep.NotInstalled, []string{late.CRD()}) {
		t.Fatalf("not installed %v, want %s", rep.NotInstalled, late.CRD())
	}
	if rec.Count("CRDs not installed", late.CRD()) != 1 {
		t.Errorf("the missing CRD is not logged once")
	}
	c.env.InstallCRDs(t, unsupportedtest.WriteFile(t, unsupportedtest.CRD(late, "v1")))
	waitFor(t, "the late kind watched", func() bool { return len(r.Report().NotInstalled) == 0 && r.HasSynced() })
	c.create(t, late, ns, "late", map[string]any{})
	waitFor(t, "the late kind's object reported", func() bool { return len(inNamespace(r.Report(), ns)) == 1 })
	if rec.Count("CRDs not installed") != 1 {
		t.Errorf("the missing CRD was logged again at each poll")
	}
}
