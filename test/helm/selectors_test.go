package helm

import (
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func labelSet(m map[string]string) labels.Set { return labels.Set(m) }

// matching returns "<install>/<webhook>" for every webhook of the installs
// the API server would call for a pod with podLabels in namespace ns
// labelled nsLabels.
func matching(t *testing.T, installs map[string]*Rendered, ns string, nsLabels, podLabels map[string]string) []string {
	t.Helper()
	nsl := labels.Set{"kubernetes.io/metadata.name": ns}
	for k, v := range nsLabels {
		nsl[k] = v
	}
	var out []string
	for install, r := range installs {
		for _, w := range mutatingWebhook(t, r).Webhooks {
			if selects(t, w.NamespaceSelector, nsl) && selects(t, w.ObjectSelector, labels.Set(podLabels)) {
				out = append(out, install+"/"+w.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

func selects(t *testing.T, s *metav1.LabelSelector, l labels.Set) bool {
	t.Helper()
	if s == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatalf("selector %v: %v", s, err)
	}
	return sel.Matches(l)
}

// Istio's labels pick exactly one injector, the one users expect, with a
// default and a canary revision installed side by side.
func TestInjectionLabelsPickOneRevision(t *testing.T) {
	installs := map[string]*Rendered{
		"default": mustRender(t, Options{}),
		"canary":  mustRender(t, renderCases["canary"].opts),
	}
	tests := map[string]struct {
		nsLabels, podLabels map[string]string
		want                string // "<install>/<webhook>", or "" for no injection
	}{
		"a namespace labelled istio-injection=enabled gets the default revision": {
			nsLabels: map[string]string{"istio-injection": "enabled"},
			want:     "default/namespace.sidecar-injector.istio.io",
		},
		"a namespace labelled istio.io/rev=canary gets the canary": {
			nsLabels: map[string]string{"istio.io/rev": "canary"},
			want:     "canary/rev.namespace.sidecar-injector.istio.io",
		},
		"a namespace labelled istio.io/rev=default gets the default revision": {
			nsLabels: map[string]string{"istio.io/rev": "default"},
			want:     "default/rev.namespace.sidecar-injector.istio.io",
		},
		"istio-injection wins over istio.io/rev, as in Istio": {
			nsLabels: map[string]string{"istio-injection": "enabled", "istio.io/rev": "canary"},
			want:     "default/namespace.sidecar-injector.istio.io",
		},
		"a pod labelled sidecar.istio.io/inject=false is left alone": {
			nsLabels:  map[string]string{"istio-injection": "enabled"},
			podLabels: map[string]string{"sidecar.istio.io/inject": "false"},
		},
		"a canary namespace's opted-out pod is left alone": {
			nsLabels:  map[string]string{"istio.io/rev": "canary"},
			podLabels: map[string]string{"sidecar.istio.io/inject": "false"},
		},
		"an unlabelled namespace is left alone": {},
		"a namespace with injection disabled is left alone": {
			nsLabels: map[string]string{"istio-injection": "disabled"},
		},
		"a pod labelled sidecar.istio.io/inject=true gets the default revision": {
			podLabels: map[string]string{"sidecar.istio.io/inject": "true"},
			want:      "default/object.sidecar-injector.istio.io",
		},
		"a pod labelled istio.io/rev=canary gets the canary": {
			podLabels: map[string]string{"istio.io/rev": "canary"},
			want:      "canary/rev.object.sidecar-injector.istio.io",
		},
		"a pod labelled with both gets the revision it names": {
			podLabels: map[string]string{"istio.io/rev": "canary", "sidecar.istio.io/inject": "true"},
			want:      "canary/rev.object.sidecar-injector.istio.io",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := matching(t, installs, "app", tc.nsLabels, tc.podLabels)
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("webhooks called: %v, want %v", got, want)
			}
		})
	}
}

func TestInjectorSkipsIstiodsNamespace(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			ns := or(tc.opts.Namespace, DefaultNamespace)
			r := mustRender(t, tc.opts)
			for _, w := range mutatingWebhook(t, r).Webhooks {
				if !excludes(w, ns) {
					t.Errorf("%s: namespaceSelector %v does not exclude %s", w.Name, w.NamespaceSelector, ns)
				}
			}
			rev := r.Objects[0].GetLabels()["istio.io/rev"]
			for _, nsLabels := range []map[string]string{
				{"istio-injection": "enabled"}, {"istio.io/rev": rev}, {},
			} {
				pod := map[string]string{"sidecar.istio.io/inject": "true", "istio.io/rev": rev}
				if got := matching(t, map[string]*Rendered{name: r}, ns, nsLabels, pod); len(got) > 0 {
					t.Errorf("pod in %s labelled %v: injected by %v", ns, nsLabels, got)
				}
			}
		})
	}
}

func excludes(w admissionv1.MutatingWebhook, ns string) bool {
	if w.NamespaceSelector == nil {
		return false
	}
	for _, e := range w.NamespaceSelector.MatchExpressions {
		if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
			for _, v := range e.Values {
				if v == ns {
					return true
				}
			}
		}
	}
	return false
}

// Revisioned installs answer only for their own istio.io/rev value; the
// webhooks that answer for istio-injection belong to the default revision.
func TestCanaryHasOnlyRevisionWebhooks(t *testing.T) {
	var names []string
	for _, w := range mutatingWebhook(t, mustRender(t, renderCases["canary"].opts)).Webhooks {
		names = append(names, w.Name)
	}
	want := "rev.namespace.sidecar-injector.istio.io,rev.object.sidecar-injector.istio.io"
	if strings.Join(names, ",") != want {
		t.Errorf("canary webhooks %v, want %s", names, want)
	}
}
