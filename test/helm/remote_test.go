package helm

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// remoteValues are the remote profile's values with vals laid over them.
func remoteValues(vals map[string]any) map[string]any {
	return chartutil.MergeTables(deepCopy(vals), map[string]any{"istiodRemote": map[string]any{"enabled": true}})
}

// remoteCases are remote-profile installs as Istio's users write them.
// Helm merges its defaults into the values it is given: pass a deepCopy.
var remoteCases = map[string]map[string]any{
	"remotePilotAddress IPv4": remoteValues(map[string]any{"global": map[string]any{"remotePilotAddress": "10.20.30.40"}}),
	"remotePilotAddress IPv6 and injectionPath": remoteValues(map[string]any{
		"global":       map[string]any{"remotePilotAddress": "fd00::15"},
		"istiodRemote": map[string]any{"injectionPath": "/inject/cluster/cluster-b/net/net2"},
	}),
	"remotePilotAddress a DNS name, a revision": remoteValues(map[string]any{
		"revision": "blue", "global": map[string]any{"remotePilotAddress": "istiod.primary.example.com"},
	}),
	"injectionURL only": remoteValues(map[string]any{
		"istiodRemote": map[string]any{"injectionURL": "https://198.51.100.7:15017/inject/cluster/cluster-b/net/net2"},
	}),
	"profile remote, as Istio's docs install it": {
		"profile": "remote",
		"global":  map[string]any{"remotePilotAddress": "10.20.30.40", "multiCluster": map[string]any{"clusterName": "cluster-b"}, "network": "net2"},
	},
}

// remoteKinds are every kind a remote profile may render: the webhooks,
// the istiod Service (and its EndpointSlice) to the primary, and the
// reader's account and RBAC.
var remoteKinds = []string{
	"ClusterRole", "ClusterRoleBinding", "EndpointSlice", "MutatingWebhookConfiguration", "Role", "RoleBinding",
	"Service", "ServiceAccount", "ValidatingWebhookConfiguration",
}

// The remote profile installs no istiod: no Deployment, no ConfigMap, no
// ServiceAccount, Role or ClusterRole of istiod's (the CA's signing key
// and Secret rights among them), only the webhooks calling the primary,
// the Service to it, and the reader's RBAC, which is docs/rbac.md's.
func TestRemoteProfileInstallsNoIstiod(t *testing.T) {
	var docReader rbacv1.ClusterRole
	var docCR rbacv1.ClusterRole
	var docRole rbacv1.Role
	docPrimaryRemote(t, "remote-reader", &docReader)
	docPrimaryRemote(t, "primary-remote-clusterrole", &docCR)
	docPrimaryRemote(t, "primary-remote-role", &docRole)
	for name, vals := range remoteCases {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, Options{Values: deepCopy(vals)})
			if err := Lint("", deepCopy(vals)); err != nil {
				t.Errorf("helm lint --strict: %v", err)
			}
			rev := ""
			if s, _ := vals["revision"].(string); s != "" {
				rev = "-" + s
			}
			for _, u := range r.Objects {
				if !slices.Contains(remoteKinds, u.GetKind()) {
					t.Errorf("the remote profile renders %s", objectKey(u))
				}
				switch u.GetKind() {
				case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount":
					if !isReader(u) {
						t.Errorf("the remote profile renders %s, which is not the reader's", objectKey(u))
					}
				}
			}
			if _, err := toTypedAll(r); err != nil {
				t.Fatal(err)
			}
			// The reader's rules and the primary-remote rules are exactly
			// docs/rbac.md's, nothing else is granted.
			var got []string
			for _, u := range append(ofKind(r, "ClusterRole"), ofKind(r, "Role")...) {
				obj, _ := toTyped(u)
				var rules []rbacv1.PolicyRule
				switch o := obj.(type) {
				case *rbacv1.ClusterRole:
					rules = o.Rules
				case *rbacv1.Role:
					rules = o.Rules
				}
				got = append(got, u.GetKind()+" "+u.GetName())
				want := map[string][]rbacv1.PolicyRule{
					"istio-reader-clusterrole" + rev + "-istio-system":    docReader.Rules,
					"istio-reader-primary-remote" + rev + "-istio-system": renameWebhooks(docCR.Rules, "istio-sidecar-injector"+rev, "istio-validator"+rev+"-istio-system"),
					"istio-reader-primary-remote" + rev:                   docRole.Rules,
				}[u.GetName()]
				if !reflect.DeepEqual(rules, want) {
					t.Errorf("%s %s:\n%+v\nwant docs/rbac.md's\n%+v", u.GetKind(), u.GetName(), rules, want)
				}
			}
			sort.Strings(got)
			want := []string{"ClusterRole istio-reader-clusterrole" + rev + "-istio-system", "ClusterRole istio-reader-primary-remote" + rev + "-istio-system", "Role istio-reader-primary-remote" + rev}
			if !slices.Equal(got, want) {
				t.Errorf("roles %v, want %v", got, want)
			}
			if !strings.Contains(r.Notes, "No istiod runs in this cluster") || !strings.Contains(r.Notes, "topology.istio.io/controlPlaneClusters") ||
				!strings.Contains(r.Notes, "have no effect here") {
				t.Errorf("NOTES do not say what the remote profile is and what is left to do:\n%s", r.Notes)
			}
			for _, k := range []string{"istiodRemote.enabled", "istiodRemote.injectionURL", "istiodRemote.injectionPath", "global.remotePilotAddress", "profile"} {
				if strings.Contains(r.Notes, k+": ") {
					t.Errorf("NOTES list %s as ignored:\n%s", k, r.Notes)
				}
			}
		})
	}
}

func toTypedAll(r *Rendered) ([]any, error) {
	var out []any
	for _, u := range r.Objects {
		obj, err := toTyped(u)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// renderIstioChart renders one of Istio's charts (manifests/charts/<dir>
// of the istio.io/istio module) into istio-system with vals.
func renderIstioChart(t *testing.T, dir string, vals map[string]any) *Rendered {
	t.Helper()
	mod, err := istioModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.Load(filepath.Join(mod, "manifests", "charts", dir))
	if err != nil {
		t.Fatalf("load Istio's chart %s: %v", dir, err)
	}
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.DryRunOption, install.ClientOnly, install.Replace = true, "client", true, true
	install.ReleaseName, install.Namespace, install.KubeVersion = "istiod", DefaultNamespace, kv
	rel, err := install.Run(c, deepCopy(vals))
	if err != nil {
		t.Fatalf("render Istio's chart %s: %v", dir, err)
	}
	objs, err := ParseManifest(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return &Rendered{Manifest: rel.Manifest, Objects: objs}
}

// typedOf returns the objects of kind as T.
func typedOf[T any](t *testing.T, r *Rendered, kind string) []T {
	t.Helper()
	var out []T
	for _, u := range ofKind(r, kind) {
		obj, err := toTyped(u)
		if err != nil {
			t.Fatal(err)
		}
		if typed, ok := obj.(T); ok {
			out = append(out, typed)
		}
	}
	return out
}

// injectionShape is what decides which pods a mutating webhook takes,
// where it sends them and what happens when it cannot: selectors, client
// config (service and path, or URL), rules and failure policy.
func injectionShape(w admissionv1.MutatingWebhook) string {
	url := ""
	if w.ClientConfig.URL != nil {
		url = " url=" + *w.ClientConfig.URL
	}
	fail := "<nil>"
	if w.FailurePolicy != nil {
		fail = string(*w.FailurePolicy)
	}
	return fmt.Sprintf("%s%s | rules: %s | failurePolicy: %s", webhookShape(w), url, rulesKey(w.Rules), fail)
}

func rulesKey(rules []admissionv1.RuleWithOperations) string {
	var out []string
	for _, r := range rules {
		scope := "*" // the API's default
		if r.Scope != nil {
			scope = string(*r.Scope)
		}
		out = append(out, fmt.Sprintf("%v %v %v %v %s", r.Operations, r.APIGroups, r.APIVersions, r.Resources, scope))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// The remote profile's injection webhooks are Istio's, rendered with the
// same values: the same configuration name, webhooks, namespace and object
// selectors (but istiod's own namespace, which Bulwark never injects),
// rules, failure policy, and the same client config: the istiod Service
// on the same path, or the same URL. The istiod Service and its
// EndpointSlice reach the same address on the same ports.
func TestRemoteProfileMatchesIstios(t *testing.T) {
	for name, vals := range remoteCases {
		if _, ok := vals["profile"]; ok {
			// Istio's injection path stays /inject there; Bulwark's
			// follows clusterName and network (README).
			continue
		}
		t.Run(name, func(t *testing.T) {
			ours, theirs := mustRender(t, Options{Values: deepCopy(vals)}), renderIstio(t, deepCopy(vals))
			om, im := mutatingWebhook(t, ours), one[*admissionv1.MutatingWebhookConfiguration](t, "MutatingWebhookConfiguration", ofKind(theirs, "MutatingWebhookConfiguration"))
			if om.Name != im.Name {
				t.Errorf("configuration %q, Istio's %q", om.Name, im.Name)
			}
			shapes := func(m *admissionv1.MutatingWebhookConfiguration) []string {
				var out []string
				for _, w := range m.Webhooks {
					out = append(out, injectionShape(w))
				}
				sort.Strings(out)
				return out
			}
			if got, want := shapes(om), shapes(im); !slices.Equal(got, want) {
				t.Errorf("webhooks differ from Istio's\nours:\n  %s\nIstio's:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if n := len(ofKind(theirs, "Deployment")); n != 0 {
				t.Fatalf("Istio's chart renders %d Deployments for these values: not its remote profile", n)
			}
			if got, want := remoteServiceKey(t, ours), remoteServiceKey(t, theirs); got != want {
				t.Errorf("istiod Service and EndpointSlice\nours:    %s\nIstio's: %s", got, want)
			}
		})
	}
}

// remoteServiceKey writes what makes istiod[-<rev>].<ns>.svc reach the
// primary: the Service's type, external name, ports, and its
// EndpointSlices' address type, addresses and ports.
func remoteServiceKey(t *testing.T, r *Rendered) string {
	t.Helper()
	var out []string
	for _, s := range typedOf[*corev1.Service](t, r, "Service") {
		typ := s.Spec.Type
		if typ == "" {
			typ = corev1.ServiceTypeClusterIP
		}
		var ports []string
		for _, p := range s.Spec.Ports {
			target := p.TargetPort.String()
			if p.TargetPort.IntValue() == 0 && p.TargetPort.StrVal == "" {
				target = fmt.Sprint(p.Port)
			}
			ports = append(ports, fmt.Sprintf("%s:%d->%s/%s", p.Name, p.Port, target, p.Protocol))
		}
		out = append(out, fmt.Sprintf("Service %s/%s %s %q selector=%v ports=%v", s.Namespace, s.Name, typ, s.Spec.ExternalName, s.Spec.Selector, ports))
	}
	for _, e := range typedOf[*discoveryv1.EndpointSlice](t, r, "EndpointSlice") {
		var addrs, ports []string
		for _, ep := range e.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		for _, p := range e.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d/%s", *p.Name, *p.Port, *p.Protocol))
		}
		out = append(out, fmt.Sprintf("EndpointSlice %s/%s for %s %s %v ports=%v", e.Namespace, e.Name, e.Labels[discoveryv1.LabelServiceName], e.AddressType, addrs, ports))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// The remote profile's validating webhooks send the Istio kinds to the
// primary's istiod as the validating webhook Istio installs in a remote
// cluster does (its base chart's istiod-default-validator): the same
// client config, operations, groups and failure policy. They name the
// kinds istiod knows rather than "*" (TestChartCoversTheKindsOfPolicy),
// and take objects by revision label as the local install does.
func TestRemoteProfileValidationMatchesIstios(t *testing.T) {
	for name, c := range map[string]struct{ ours, base map[string]any }{
		"through the istiod Service": {
			ours: remoteCases["remotePilotAddress IPv4"],
			base: map[string]any{"defaultRevision": "default"},
		},
		"at base.validationURL": {
			ours: remoteValues(map[string]any{"base": map[string]any{"validationURL": "https://198.51.100.7:15017/validate"}, "istiodRemote": map[string]any{"injectionURL": "https://198.51.100.7:15017/inject"}}),
			base: map[string]any{"defaultRevision": "default", "base": map[string]any{"validationURL": "https://198.51.100.7:15017/validate"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ours := validatingWebhook(t, mustRender(t, Options{Values: deepCopy(c.ours)}))
			theirs := one[*admissionv1.ValidatingWebhookConfiguration](t, "ValidatingWebhookConfiguration", ofKind(renderIstioChart(t, "base", c.base), "ValidatingWebhookConfiguration"))
			key := func(w admissionv1.ValidatingWebhook) string {
				target := ""
				if s := w.ClientConfig.Service; s != nil {
					port := int32(443)
					if s.Port != nil {
						port = *s.Port
					}
					target = fmt.Sprintf("%s/%s:%d%s", s.Namespace, s.Name, port, *s.Path)
				}
				if w.ClientConfig.URL != nil {
					target = *w.ClientConfig.URL
				}
				groups := map[string]bool{}
				ops := map[string]bool{}
				for _, r := range w.Rules {
					for _, g := range r.APIGroups {
						groups[g] = true
					}
					for _, o := range r.Operations {
						ops[string(o)] = true
					}
				}
				return fmt.Sprintf("-> %s | groups %v | operations %v | failurePolicy %s | sideEffects %s", target, sortedKeys(groups), sortedKeys(ops), *w.FailurePolicy, *w.SideEffects)
			}
			want := key(theirs.Webhooks[0])
			if len(theirs.Webhooks) != 1 {
				t.Fatalf("Istio's base chart renders %d validating webhooks", len(theirs.Webhooks))
			}
			for _, w := range ours.Webhooks {
				if got := key(w); got != want {
					t.Errorf("%s: %s\nIstio's: %s", w.Name, got, want)
				}
			}
		})
	}
	// Without an address for it, nothing to call: no validating webhook.
	r := mustRender(t, Options{Values: deepCopy(remoteCases["injectionURL only"])})
	if n := len(ofKind(r, "ValidatingWebhookConfiguration")); n != 0 || !strings.Contains(r.Notes, "validation: NOT installed") {
		t.Errorf("injectionURL only: %d validating configurations; NOTES:\n%s", n, r.Notes)
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// What the remote profile cannot work with is refused with the reason:
// no address of the primary, an istiod local to the remote (Istio's
// enabledLocalInjectorIstiod), and malformed addresses, URLs and paths.
func TestRemoteProfileRefusesWhatCannotWork(t *testing.T) {
	for name, c := range map[string]struct {
		vals map[string]any
		want string
	}{
		"no address of the primary":         {remoteValues(nil), "set global.remotePilotAddress"},
		"profile remote without an address": {map[string]any{"profile": "remote"}, "set global.remotePilotAddress"},
		"a local injector istiod": {
			remoteValues(map[string]any{"global": map[string]any{"remotePilotAddress": "10.0.0.1"}, "istiodRemote": map[string]any{"enabledLocalInjectorIstiod": true}}),
			"enabledLocalInjectorIstiod: true is not supported",
		},
		"an http injectionURL": {remoteValues(map[string]any{"istiodRemote": map[string]any{"injectionURL": "http://10.0.0.1:15017/inject"}}), "injectionURL"},
		"an injectionPath istiod does not serve": {
			remoteValues(map[string]any{"global": map[string]any{"remotePilotAddress": "10.0.0.1"}, "istiodRemote": map[string]any{"injectionPath": "/mutate"}}),
			"injectionPath",
		},
		"an address with a port":       {remoteValues(map[string]any{"global": map[string]any{"remotePilotAddress": "10.0.0.1:15012"}}), "remotePilotAddress"},
		"an address that is no name":   {remoteValues(map[string]any{"global": map[string]any{"remotePilotAddress": "istiod primary"}}), "remotePilotAddress"},
		"an IPv4 address out of range": {remoteValues(map[string]any{"global": map[string]any{"remotePilotAddress": "10.0.0.300"}}), "remotePilotAddress"},
		"an http validationURL": {
			remoteValues(map[string]any{"global": map[string]any{"remotePilotAddress": "10.0.0.1"}, "base": map[string]any{"validationURL": "http://10.0.0.1/validate"}}),
			"validationURL",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(Options{Values: c.vals})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("render: %v; want an error naming %q", err, c.want)
			}
		})
	}
}

// Without istiodRemote.enabled the keys of the remote profile are
// reported, not used: istiod runs here and the webhooks call it.
func TestRemoteKeysReportedOutsideTheRemoteProfile(t *testing.T) {
	r := mustRender(t, Options{Values: map[string]any{
		"istiodRemote": map[string]any{"injectionURL": "https://10.0.0.1:15017/inject", "injectionPath": "/inject/cluster/x/net/y"},
		"global":       map[string]any{"remotePilotAddress": "10.0.0.1", "configCluster": true},
		"base":         map[string]any{"validationURL": "https://10.0.0.1:15017/validate", "validationCABundle": "x"},
	}})
	deployment(t, r)
	for _, w := range mutatingWebhook(t, r).Webhooks {
		if w.ClientConfig.URL != nil || w.ClientConfig.Service == nil || *w.ClientConfig.Service.Path != "/inject" {
			t.Errorf("%s calls %+v, want istiod's Service on /inject", w.Name, w.ClientConfig)
		}
	}
	if n := len(ofKind(r, "EndpointSlice")); n != 0 {
		t.Errorf("%d EndpointSlices", n)
	}
	for _, k := range []string{"istiodRemote.injectionURL: read only with istiodRemote.enabled", "istiodRemote.injectionPath: read only", "global.remotePilotAddress: read only",
		"base.validationURL: read only", "base.validationCABundle: not read", "global.configCluster: "} {
		if !strings.Contains(r.Notes, k) {
			t.Errorf("NOTES do not report %q:\n%s", k, r.Notes)
		}
	}
}
