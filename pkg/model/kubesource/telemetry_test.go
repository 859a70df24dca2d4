package kubesource

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	telemetryapi "istio.io/api/telemetry/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	istiotelemetry "istio.io/client-go/pkg/apis/telemetry/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func newTelemetry(ns, name string, selector map[string]string, created int64) *istiotelemetry.Telemetry {
	tel := &istiotelemetry.Telemetry{ObjectMeta: objectMeta(ns, name, nil)}
	tel.CreationTimestamp = metav1.Unix(created, 0)
	if selector != nil {
		tel.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: selector}
	}
	tel.Spec.AccessLogging = []*telemetryapi.AccessLogging{{Providers: []*telemetryapi.ProviderRef{{Name: "envoy"}}}}
	return tel
}

// TestATelemetryChangeRebuildsOnlyItsKind: Telemetries are read with
// their creation times, an event naming one makes that one again and
// nothing else, and the change is a config change, which regenerates
// every listener.
func TestATelemetryChangeRebuildsOnlyItsKind(t *testing.T) {
	objs := []any{
		newTelemetry("istio-system", "mesh", nil, 1), newTelemetry("a", "ns", nil, 2),
		newTelemetry("a", "echo", map[string]string{"app": "echo"}, 3), newDestinationRule("a", "dr", "s0"),
	}
	l, idx := cacheIndexers(t, objs...)
	var r reuse
	first := buildReusing(l, model.Options{}, &r, &touched{})
	old := *first.Resources()
	if len(old.Telemetries) != 3 || old.Telemetries[0].Name != "echo" || old.Telemetries[0].Created.Unix() != 3 {
		t.Fatalf("first build: %d telemetries", len(old.Telemetries))
	}
	sc := first.TelemetriesFor("a", map[string]string{"app": "echo"}, nil)
	if sc.Root != old.Telemetries[2] || sc.Namespace != old.Telemetries[1] || len(sc.Workload) != 1 || sc.Workload[0] != old.Telemetries[0] {
		t.Fatalf("scope of a/echo: %+v", sc)
	}

	changed := newTelemetry("a", "ns", nil, 2)
	changed.Spec.AccessLogging[0].Disabled = wrapperspb.Bool(true)
	changed.ResourceVersion = "2"
	if err := idx["tel"].Update(changed); err != nil {
		t.Fatal(err)
	}
	events := &touched{}
	events.add(changed)
	next := buildReusing(l, model.Options{}, &r, events)
	res := next.Resources()
	if next.Version == first.Version || !res.Telemetries[1].Spec.GetAccessLogging()[0].GetDisabled().GetValue() {
		t.Fatal("the change is not in the rebuild")
	}
	if res.Telemetries[0] != old.Telemetries[0] || res.Telemetries[2] != old.Telemetries[2] || res.Telemetries[1] == old.Telemetries[1] {
		t.Error("the Telemetries the event did not name were made again, or the one it named was not")
	}
	if &res.DestinationRules[0] != &old.DestinationRules[0] {
		t.Error("a kind the event did not touch was rebuilt")
	}
	if want := build(l, model.Options{}); want.Version != next.Version || !reflect.DeepEqual(want.Resources(), res) {
		t.Error("the rebuild differs from a fresh build")
	}
	if c := model.Diff(first, next); !c.Config {
		t.Errorf("the Telemetry change is not a config change: %+v", c)
	}
}
