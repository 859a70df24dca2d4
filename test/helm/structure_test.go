package helm

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestEveryObjectMatchesItsAPIType(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			for _, u := range mustRender(t, tc.opts).Objects {
				if u.GroupVersionKind().Group == "monitoring.coreos.com" {
					continue // not a client-go type
				}
				if _, err := toTyped(u); err != nil {
					t.Error(err)
				}
				if !clusterScoped[u.GetKind()] && u.GetNamespace() == "" {
					t.Errorf("%s has no namespace", objectKey(u))
				}
				if clusterScoped[u.GetKind()] && u.GetNamespace() != "" {
					t.Errorf("%s is cluster-scoped but has a namespace", objectKey(u))
				}
			}
		})
	}
}

func TestEveryContainerIsLockedDown(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			spec := deployment(t, mustRender(t, tc.opts)).Spec.Template.Spec
			pod := spec.SecurityContext
			if pod == nil {
				pod = &corev1.PodSecurityContext{}
			}
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				sc := c.SecurityContext
				if sc == nil {
					t.Errorf("container %s: no securityContext", c.Name)
					continue
				}
				nonRoot := sc.RunAsNonRoot
				if nonRoot == nil {
					nonRoot = pod.RunAsNonRoot
				}
				if nonRoot == nil || !*nonRoot {
					t.Errorf("container %s: runAsNonRoot not true", c.Name)
				}
				if uid := sc.RunAsUser; uid != nil && *uid == 0 || sc.RunAsUser == nil && pod.RunAsUser != nil && *pod.RunAsUser == 0 {
					t.Errorf("container %s: runs as uid 0", c.Name)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("container %s: root file system is writable", c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("container %s: allowPrivilegeEscalation not false", c.Name)
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("container %s: privileged", c.Name)
				}
				if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
					t.Errorf("container %s: capabilities %+v, want drop ALL and add none", c.Name, sc.Capabilities)
				}
				seccomp := sc.SeccompProfile
				if seccomp == nil {
					seccomp = pod.SeccompProfile
				}
				if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("container %s: seccomp profile %+v, want RuntimeDefault", c.Name, seccomp)
				}
			}
		})
	}
}

// A user's securityContext may add settings but not weaken the enforced ones.
func TestSecurityContextCannotBeWeakened(t *testing.T) {
	r := mustRender(t, Options{Values: map[string]any{"securityContext": map[string]any{
		"runAsNonRoot": false, "readOnlyRootFilesystem": false, "allowPrivilegeEscalation": true,
		"privileged": true, "capabilities": map[string]any{"add": []any{"NET_ADMIN"}},
		"runAsUser": 4242,
	}}})
	sc := deployment(t, r).Spec.Template.Spec.Containers[0].SecurityContext
	if !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || *sc.Privileged ||
		len(sc.Capabilities.Add) > 0 || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("weakened security context rendered: %+v", sc)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 4242 {
		t.Errorf("runAsUser = %v, want the user's 4242", sc.RunAsUser)
	}
}

func TestRevisionSuffixesEveryName(t *testing.T) {
	r := mustRender(t, renderCases["canary"].opts)
	for _, u := range r.Objects {
		if !strings.Contains(u.GetName(), "-canary") {
			t.Errorf("%s: name lacks the revision", objectKey(u))
		}
		if got := u.GetLabels()["istio.io/rev"]; got != "canary" {
			t.Errorf("%s: istio.io/rev = %q, want canary", objectKey(u), got)
		}
	}
	d := deployment(t, r)
	if got := d.Spec.Selector.MatchLabels["istio.io/rev"]; got != "canary" {
		t.Errorf("Deployment selector istio.io/rev = %q", got)
	}
	for _, name := range []string{"istio-canary", "istio-sidecar-injector-canary"} {
		configMap(t, r, name)
	}
	if env := envOf(d); env["REVISION"] != "canary" {
		t.Errorf("REVISION = %q", env["REVISION"])
	}
}

// "default" is the same revision as none: same names, as istiod treats it.
func TestDefaultRevisionNamedLikeNoRevision(t *testing.T) {
	none := mustRender(t, Options{})
	def := mustRender(t, Options{Values: map[string]any{"revision": "default"}})
	if len(none.Objects) != len(def.Objects) {
		t.Fatalf("%d objects vs %d", len(none.Objects), len(def.Objects))
	}
	for i := range none.Objects {
		if a, b := objectKey(none.Objects[i]), objectKey(def.Objects[i]); a != b {
			t.Errorf("revision default renders %s where no revision renders %s", b, a)
		}
	}
}

func TestRevisionsInstallSideBySide(t *testing.T) {
	installs := map[string]Options{
		"default in istio-system": {},
		"canary in istio-system":  renderCases["canary"].opts,
		"default in mesh-system":  {Namespace: "mesh-system"},
		"canary in mesh-system":   {Namespace: "mesh-system", ValuesFiles: renderCases["canary"].opts.ValuesFiles},
	}
	owner := map[string]string{}
	for install, opts := range installs {
		for _, u := range mustRender(t, opts).Objects {
			key := objectKey(u)
			if prev, ok := owner[key]; ok {
				t.Errorf("%s rendered by both %q and %q", key, prev, install)
			}
			owner[key] = install
		}
	}
}

func TestWebhooksLeaveCABundleToIstiod(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, tc.opts)
			for _, w := range mutatingWebhook(t, r).Webhooks {
				if len(w.ClientConfig.CABundle) != 0 {
					t.Errorf("%s: caBundle rendered", w.Name)
				}
			}
			for _, w := range validatingWebhook(t, r).Webhooks {
				if len(w.ClientConfig.CABundle) != 0 {
					t.Errorf("%s: caBundle rendered", w.Name)
				}
			}
			// Not even an empty caBundle: helm upgrade would write it back
			// over the one istiod patched in.
			for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
				for _, u := range ofKind(r, kind) {
					hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
					for _, h := range hooks {
						if _, found, _ := unstructured.NestedFieldNoCopy(h.(map[string]any), "clientConfig", "caBundle"); found {
							t.Errorf("%s: caBundle key rendered", objectKey(u))
						}
					}
				}
			}
		})
	}
}

func TestWebhookSettings(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, tc.opts)
			for _, w := range mutatingWebhook(t, r).Webhooks {
				if *w.FailurePolicy != "Fail" || *w.SideEffects != "None" || !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
					t.Errorf("%s: failurePolicy %s, sideEffects %s, versions %v", w.Name, *w.FailurePolicy, *w.SideEffects, w.AdmissionReviewVersions)
				}
				if w.ReinvocationPolicy == nil || w.TimeoutSeconds == nil {
					t.Errorf("%s: no reinvocationPolicy or timeoutSeconds", w.Name)
				}
			}
			for _, w := range validatingWebhook(t, r).Webhooks {
				if *w.FailurePolicy != "Ignore" {
					t.Errorf("%s: failurePolicy %s at install, want Ignore", w.Name, *w.FailurePolicy)
				}
				if w.ClientConfig.URL == nil && w.ClientConfig.Service.Path != nil && *w.ClientConfig.Service.Path != "/validate" {
					t.Errorf("%s: path %s", w.Name, *w.ClientConfig.Service.Path)
				}
			}
		})
	}
}

func TestWebhookClientConfig(t *testing.T) {
	tests := map[string]struct {
		opts      Options
		url, path string
		service   string
	}{
		"the default install calls the Service on /inject": {
			opts: Options{}, service: "istiod", path: "/inject",
		},
		"a canary calls its own Service": {
			opts: renderCases["canary"].opts, service: "istiod-canary", path: "/inject",
		},
		"a named cluster and network are in the path": {
			opts: renderCases["plugged-ca"].opts, service: "istiod", path: "/inject/cluster/cluster1/net/network1",
		},
		"webhook.url replaces the Service": {
			opts: renderCases["webhook-url"].opts, url: "https://10.0.0.1:15017/inject",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, tc.opts)
			ns := or(tc.opts.Namespace, DefaultNamespace)
			for _, w := range mutatingWebhook(t, r).Webhooks {
				cc := w.ClientConfig
				if tc.url != "" {
					if cc.URL == nil || *cc.URL != tc.url || cc.Service != nil {
						t.Errorf("%s: url %v service %v, want url %s only", w.Name, cc.URL, cc.Service, tc.url)
					}
					continue
				}
				if cc.URL != nil || cc.Service == nil {
					t.Fatalf("%s: want a service, got url %v", w.Name, cc.URL)
				}
				s := cc.Service
				if s.Name != tc.service || s.Namespace != ns || *s.Path != tc.path || *s.Port != 443 {
					t.Errorf("%s: service %s/%s:%d%s, want %s/%s:443%s", w.Name, s.Namespace, s.Name, *s.Port, *s.Path, ns, tc.service, tc.path)
				}
			}
		})
	}
}

func TestServiceReachesIstiodPorts(t *testing.T) {
	r := mustRender(t, Options{})
	svc := only[*corev1.Service](t, r, "Service")
	want := map[string][2]int32{
		"grpc-xds": {15010, 15010}, "https-dns": {15012, 15012},
		"https-webhook": {443, 15017}, "http-monitoring": {15014, 15014},
	}
	if len(svc.Spec.Ports) != len(want) {
		t.Errorf("%d ports, want %d", len(svc.Spec.Ports), len(want))
	}
	d := deployment(t, r)
	containerPorts := map[int32]bool{}
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		containerPorts[p.ContainerPort] = true
	}
	for _, p := range svc.Spec.Ports {
		w, ok := want[p.Name]
		if !ok || p.Port != w[0] || p.TargetPort != intstr.FromInt32(w[1]) {
			t.Errorf("port %s %d->%s, want %v", p.Name, p.Port, p.TargetPort.String(), w)
		}
		if p.Name != "grpc-xds" && !containerPorts[p.TargetPort.IntVal] {
			t.Errorf("port %s targets %d, which the container does not declare", p.Name, p.TargetPort.IntVal)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labelSet(d.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not select istiod's pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
}

func TestValidationCanBeLeftOut(t *testing.T) {
	r := mustRender(t, Options{Values: map[string]any{"webhook": map[string]any{"validation": false}}})
	if n := len(ofKind(r, "ValidatingWebhookConfiguration")); n != 0 {
		t.Errorf("%d ValidatingWebhookConfigurations with validation off", n)
	}
	for _, u := range ofKind(r, "ClusterRole") {
		rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
		for _, rule := range rules {
			if res, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "resources"); slices.Contains(res, "validatingwebhookconfigurations") {
				if names, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "resourceNames"); len(names) > 0 {
					t.Errorf("ClusterRole still names validating webhook %v", names)
				}
			}
		}
	}
	if env := envOf(deployment(t, r)); env["VALIDATION_WEBHOOK_CONFIG_NAME"] != "" {
		t.Errorf("VALIDATION_WEBHOOK_CONFIG_NAME = %q with validation off", env["VALIDATION_WEBHOOK_CONFIG_NAME"])
	}
}
