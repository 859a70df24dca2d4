package helm

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// renderIstio renders Istio's own istiod chart (istio-discovery, from the
// istio.io/istio module) into istio-system with vals, as `helm template`.
func renderIstio(t *testing.T, vals map[string]any) *Rendered {
	t.Helper()
	dir, err := istioModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.Load(filepath.Join(dir, "manifests", "charts", "istio-control", "istio-discovery"))
	if err != nil {
		t.Fatalf("load Istio's chart: %v", err)
	}
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.DryRunOption, install.ClientOnly, install.Replace = true, "client", true, true
	install.ReleaseName, install.Namespace, install.KubeVersion = "istiod", DefaultNamespace, kv
	rel, err := install.Run(c, vals)
	if err != nil {
		t.Fatalf("render Istio's chart: %v", err)
	}
	objs, err := ParseManifest(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return &Rendered{Manifest: rel.Manifest, Objects: objs}
}

// selectorKey writes a label selector's requirements in a canonical order,
// leaving out the one Bulwark adds and Istio has not (istiod's own
// namespace is never injected).
func selectorKey(s *metav1.LabelSelector) string {
	if s == nil {
		return "<nil>"
	}
	var reqs []string
	for k, v := range s.MatchLabels {
		reqs = append(reqs, k+"="+v)
	}
	for _, e := range s.MatchExpressions {
		if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
			continue
		}
		vals := slices.Clone(e.Values)
		sort.Strings(vals)
		reqs = append(reqs, fmt.Sprintf("%s %s %v", e.Key, e.Operator, vals))
	}
	sort.Strings(reqs)
	return strings.Join(reqs, "; ")
}

// webhookShape is what decides which pods a webhook takes and where it
// sends them.
func webhookShape(w admissionv1.MutatingWebhook) string {
	svc := "<url>"
	if s := w.ClientConfig.Service; s != nil {
		path := ""
		if s.Path != nil {
			path = *s.Path
		}
		port := int32(443) // the API's default
		if s.Port != nil {
			port = *s.Port
		}
		svc = fmt.Sprintf("%s/%s:%d%s", s.Namespace, s.Name, port, path)
	}
	return fmt.Sprintf("%s -> %s | namespaces: %s | objects: %s", w.Name, svc, selectorKey(w.NamespaceSelector), selectorKey(w.ObjectSelector))
}

// A revision of Bulwark's chart injects exactly the pods Istio's chart of
// the same revision injects, through webhooks of the same names, calling
// the istiod[-<revision>] Service, in a configuration of the same name
// labelled istio.io/rev: so relabelling a namespace istio.io/rev=bulwark
// moves its pods to Bulwark as it would move them to an Istio canary.
// The one difference, istiod's own namespace left out, is
// TestInjectorSkipsIstiodsNamespace's.
func TestRevisionWebhooksMatchIstios(t *testing.T) {
	for _, rev := range []string{"bulwark", ""} {
		t.Run("revision "+or(rev, "default"), func(t *testing.T) {
			ours := mutatingWebhook(t, mustRender(t, Options{Values: map[string]any{"revision": rev}}))
			theirs := mutatingWebhook(t, renderIstio(t, map[string]any{"revision": rev}))
			if ours.Name != theirs.Name {
				t.Errorf("configuration %q, Istio's %q", ours.Name, theirs.Name)
			}
			if ours.Labels["istio.io/rev"] != theirs.Labels["istio.io/rev"] {
				t.Errorf("istio.io/rev label %q, Istio's %q", ours.Labels["istio.io/rev"], theirs.Labels["istio.io/rev"])
			}
			shapes := func(m *admissionv1.MutatingWebhookConfiguration) []string {
				var out []string
				for _, w := range m.Webhooks {
					out = append(out, webhookShape(w))
				}
				sort.Strings(out)
				return out
			}
			if got, want := shapes(ours), shapes(theirs); !slices.Equal(got, want) {
				t.Errorf("webhooks differ from Istio's\nours:\n  %s\nIstio's:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

// Bulwark as revision bulwark beside Istio's default revision, as the
// migration guide installs it: each label a user sets picks one injector,
// the one the guide says.
func TestBulwarkRevisionBesideIstio(t *testing.T) {
	installs := map[string]*Rendered{
		"istio":   renderIstio(t, map[string]any{}),
		"bulwark": mustRender(t, Options{Values: map[string]any{"revision": "bulwark"}}),
	}
	for name, tc := range map[string]struct {
		nsLabels, podLabels map[string]string
		want                string // install/webhook, "" for none
	}{
		"a namespace still labelled istio-injection=enabled stays with Istio": {
			nsLabels: map[string]string{"istio-injection": "enabled"}, want: "istio/namespace.sidecar-injector.istio.io",
		},
		"a namespace relabelled istio.io/rev=bulwark moves to Bulwark": {
			nsLabels: map[string]string{"istio.io/rev": "bulwark"}, want: "bulwark/rev.namespace.sidecar-injector.istio.io",
		},
		"istio-injection left beside istio.io/rev=bulwark keeps the namespace with Istio": {
			nsLabels: map[string]string{"istio-injection": "enabled", "istio.io/rev": "bulwark"}, want: "istio/namespace.sidecar-injector.istio.io",
		},
		"a pod labelled istio.io/rev=bulwark in an unlabelled namespace moves alone": {
			podLabels: map[string]string{"istio.io/rev": "bulwark"}, want: "bulwark/rev.object.sidecar-injector.istio.io",
		},
		"a namespace labelled istio.io/rev=default stays with Istio": {
			nsLabels: map[string]string{"istio.io/rev": "default"}, want: "istio/rev.namespace.sidecar-injector.istio.io",
		},
		"a pod opting out is injected by neither": {
			nsLabels: map[string]string{"istio.io/rev": "bulwark"}, podLabels: map[string]string{"sidecar.istio.io/inject": "false"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := matching(t, installs, "app", tc.nsLabels, tc.podLabels)
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if !slices.Equal(got, want) {
				t.Errorf("injected by %v, want %v", got, want)
			}
		})
	}
}
