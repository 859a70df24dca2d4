package helm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// istioModuleDir is the istio.io/istio module the interop tests build
// against: its manifests/ hold Istio's istiod chart and profiles.
var istioModuleDir = sync.OnceValues(func() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "istio.io/istio")
	cmd.Dir = filepath.Join("..", "interop")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download istio.io/istio: %w", err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download istio.io/istio: %v %s", err, mod.Error)
	}
	return mod.Dir, nil
})

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// istioValueSets are values files an Istio user has for Istio's istiod
// chart, read from Istio's own manifests: the chart's defaults as a user
// copies them (without Istio's internal wrapper), the Helm profiles, and the
// IstioOperator profiles as values (spec.values, spec.hub and spec.tag as
// global.hub and global.tag, spec.meshConfig as meshConfig; minimal laid
// over default, as istioctl does).
func istioValueSets(t *testing.T) map[string]map[string]any {
	t.Helper()
	dir, err := istioModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(dir, "manifests")
	chartValues := readYAML(t, filepath.Join(manifests, "charts", "istio-control", "istio-discovery", "values.yaml"))
	defaults, ok := chartValues["_internal_defaults_do_not_set"].(map[string]any)
	if !ok {
		t.Fatal("Istio's istiod chart values have no _internal_defaults_do_not_set")
	}
	sets := map[string]map[string]any{"chart defaults": defaults}
	for _, p := range []string{"demo", "preview", "remote", "stable"} {
		sets["helm profile "+p] = readYAML(t, filepath.Join(manifests, "helm-profiles", p+".yaml"))
	}
	// The remote profile alone names no primary istiod to call; its users
	// give its address (Istio's install guide does).
	sets["helm profile remote"] = chartutil.MergeTables(map[string]any{"global": map[string]any{"remotePilotAddress": "10.20.30.40"}}, sets["helm profile remote"])
	sets["chart defaults with the demo profile"] = chartutil.MergeTables(
		readYAML(t, filepath.Join(manifests, "helm-profiles", "demo.yaml")), deepCopy(defaults))
	operator := func(name string) map[string]any {
		spec, _ := readYAML(t, filepath.Join(manifests, "profiles", name+".yaml"))["spec"].(map[string]any)
		return spec
	}
	for _, p := range []string{"default", "minimal"} {
		spec := operator("default")
		if p != "default" {
			spec = chartutil.MergeTables(operator(p), spec)
		}
		vals, _ := spec["values"].(map[string]any)
		vals = deepCopy(vals)
		global, _ := vals["global"].(map[string]any)
		if global == nil {
			global = map[string]any{}
			vals["global"] = global
		}
		for _, k := range []string{"hub", "tag"} {
			if v, ok := spec[k]; ok {
				global[k] = v
			}
		}
		if mc, ok := spec["meshConfig"]; ok {
			vals["meshConfig"] = mc
		}
		sets["operator profile "+p] = vals
	}
	return sets
}

// inNamespace lays global.istioNamespace = ns over vals: Istio's files say
// istio-system, and an install elsewhere says so, with Istio's chart too.
func inNamespace(vals map[string]any, ns string) map[string]any {
	return chartutil.MergeTables(map[string]any{"global": map[string]any{"istioNamespace": ns}}, deepCopy(vals))
}

// Istio users' values files install with this chart: every set of values
// from Istio's own manifests renders, every object passes a server-side
// dry-run create on the real apiserver, the objects carry the values' hub,
// tag, resources and mesh config, and NOTES lists what was ignored.
func TestIstioValuesFilesInstall(t *testing.T) {
	t.Parallel()
	c := getCluster(t)
	for name, vals := range istioValueSets(t) {
		t.Run(name, func(t *testing.T) {
			ns := c.env.Namespace(t)
			r := mustRender(t, Options{Namespace: ns, Values: inNamespace(vals, ns)})
			for _, obj := range r.Objects {
				res, _, err := c.resourceFor(obj)
				if err != nil {
					t.Errorf("%s: %v", describe(obj), err)
					continue
				}
				if _, err := res.Create(context.Background(), obj, metav1.CreateOptions{
					DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict",
				}); err != nil {
					t.Errorf("%s refused: %v", describe(obj), err)
				}
			}
			checkCarriesIstioValues(t, r, vals)
		})
	}
}

// checkCarriesIstioValues checks the rendered objects against the Istio
// values they were rendered with.
func checkCarriesIstioValues(t *testing.T, r *Rendered, vals map[string]any) {
	t.Helper()
	pilot := deepCopy(vals)
	if p, ok := vals["pilot"].(map[string]any); ok {
		pilot = chartutil.MergeTables(deepCopy(p), pilot)
	}
	global, _ := vals["global"].(map[string]any)
	if remote, _ := vals["istiodRemote"].(map[string]any); remote["enabled"] == true {
		// The remote profile: no istiod, so none of its objects.
		for _, kind := range []string{"Deployment", "ConfigMap", "HorizontalPodAutoscaler"} {
			if objs := ofKind(r, kind); len(objs) != 0 {
				t.Errorf("the remote profile renders %s", objectKey(objs[0]))
			}
		}
		checkNotesIgnore(t, r, vals)
		return
	}

	dep := only[*appsv1.Deployment](t, r, "Deployment")
	istiod := dep.Spec.Template.Spec.Containers[0]
	if !strings.HasPrefix(istiod.Image, "ghcr.io/bulwark-mesh/istiod:") {
		t.Errorf("istiod's image %s: Istio's pilot image must never replace it", istiod.Image)
	}
	if res, ok := pilot["resources"].(map[string]any); ok {
		for kind, list := range map[string]corev1.ResourceList{"requests": istiod.Resources.Requests, "limits": istiod.Resources.Limits} {
			want, _ := res[kind].(map[string]any)
			for name, q := range want {
				if got := list[corev1.ResourceName(name)]; got.String() != normalizeQuantity(t, q) {
					t.Errorf("istiod resources.%s.%s = %s, want %v", kind, name, got.String(), q)
				}
			}
		}
	}
	hpas := ofKind(r, "HorizontalPodAutoscaler")
	if enabled, ok := pilot["autoscaleEnabled"].(bool); ok {
		if enabled != (len(hpas) == 1) {
			t.Errorf("autoscaleEnabled %v, %d HorizontalPodAutoscalers", enabled, len(hpas))
		}
		if enabled {
			hpa := only[*autoscalingv2.HorizontalPodAutoscaler](t, r, "HorizontalPodAutoscaler")
			if max, ok := pilot["autoscaleMax"]; ok && fmt.Sprint(hpa.Spec.MaxReplicas) != fmt.Sprint(max) {
				t.Errorf("HPA maxReplicas %d, want autoscaleMax %v", hpa.Spec.MaxReplicas, max)
			}
		}
	}

	var injector, mesh *corev1.ConfigMap
	for _, u := range ofKind(r, "ConfigMap") {
		obj, err := toTyped(u)
		if err != nil {
			t.Fatal(err)
		}
		switch u.GetName() {
		case "istio-sidecar-injector":
			injector = obj.(*corev1.ConfigMap)
		case "istio":
			mesh = obj.(*corev1.ConfigMap)
		}
	}
	if injector == nil || mesh == nil {
		t.Fatal("no istio or istio-sidecar-injector ConfigMap")
	}
	var injected struct {
		Global map[string]any `json:"global"`
	}
	if err := json.Unmarshal([]byte(injector.Data["values"]), &injected); err != nil {
		t.Fatalf("injector values: %v", err)
	}
	for _, k := range []string{"hub", "tag"} {
		if want, ok := global[k]; ok && fmt.Sprint(injected.Global[k]) != fmt.Sprint(want) {
			t.Errorf("injector global.%s = %v, want the values' %v", k, injected.Global[k], want)
		}
	}
	if want, ok := vals["meshConfig"].(map[string]any); ok {
		got := map[string]any{}
		if err := yaml.Unmarshal([]byte(mesh.Data["mesh"]), &got); err != nil {
			t.Fatalf("mesh: %v", err)
		}
		if path := notWithin(want, got, "meshConfig"); path != "" {
			t.Errorf("the mesh config lacks the values' %s:\n%s", path, mesh.Data["mesh"])
		}
	}
	checkNotesIgnore(t, r, vals)
}

// checkNotesIgnore: NOTES list the keys of Istio's chart that mean nothing
// here. istiodRemote's keys are read on a remote cluster only.
func checkNotesIgnore(t *testing.T, r *Rendered, vals map[string]any) {
	t.Helper()
	keys := []string{"telemetry", "gateways", "ztunnel"}
	if remote, _ := vals["istiodRemote"].(map[string]any); remote["enabled"] != true {
		keys = append(keys, "istiodRemote")
	}
	for _, k := range keys {
		// A whole key ("k: ") or, for istiodRemote, each of its keys ("k.").
		if v, ok := vals[k].(map[string]any); ok && len(v) > 0 && !strings.Contains(r.Notes, k+": ") && !strings.Contains(r.Notes, k+".") {
			t.Errorf("NOTES does not list %s as ignored:\n%s", k, r.Notes)
		}
	}
}

func normalizeQuantity(t *testing.T, q any) string {
	t.Helper()
	var rl corev1.ResourceList
	b := fmt.Sprintf(`{"x": %q}`, fmt.Sprint(q))
	if err := json.Unmarshal([]byte(b), &rl); err != nil {
		t.Fatalf("quantity %v: %v", q, err)
	}
	v := rl["x"]
	return v.String()
}

// notWithin returns the path of the first value of want that got does not
// hold (the chart may add keys, never change or drop one), or "".
func notWithin(want, got any, path string) string {
	wm, ok := want.(map[string]any)
	if !ok {
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(got)
		if string(w) != string(g) {
			return path
		}
		return ""
	}
	gm, _ := got.(map[string]any)
	for k, v := range wm {
		if p := notWithin(v, gm[k], path+"."+k); p != "" {
			return p
		}
	}
	return ""
}

// Each key of Istio's chart that has a meaning here has Istio's meaning,
// given at the top level or under Istio's legacy pilot prefix.
func TestIstioValuesKeepTheirMeaning(t *testing.T) {
	t.Parallel()
	istio := map[string]any{
		"autoscaleEnabled": true, "autoscaleMin": 2, "autoscaleMax": 7,
		"autoscaleBehavior": map[string]any{"scaleDown": map[string]any{"stabilizationWindowSeconds": 60}},
		"cpu":               map[string]any{"targetAverageUtilization": 65},
		"memory":            map[string]any{"targetAverageUtilization": 75},
		"rollingMaxSurge":   1, "rollingMaxUnavailable": "10%",
		"deploymentLabels": map[string]any{"team": "mesh"}, "deploymentAnnotations": map[string]any{"owner": "platform"},
		"serviceAnnotations": map[string]any{"svc": "a"}, "serviceAccountAnnotations": map[string]any{"iam": "role"},
		"sidecarInjectorWebhookAnnotations": map[string]any{"hook": "b"},
		"ipFamilyPolicy":                    "SingleStack", "ipFamilies": []any{"IPv4"},
		"seccompProfile": map[string]any{"type": "RuntimeDefault"},
		"env": map[string]any{
			"CLUSTER_ID": "east", "TOKEN_AUDIENCES": "istio-ca,mesh", "DEFAULT_WORKLOAD_CERT_TTL": "12h",
			"MAX_WORKLOAD_CERT_TTL": "48h", "CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE": "25", "ISTIOD_CUSTOM_HOST": "istiod.example.com", "PILOT_TRACE_SAMPLING": "5",
		},
		"pdb":                    map[string]any{"minAvailable": 2, "unhealthyPodEvictionPolicy": "IfHealthyBudget"},
		"sidecarInjectorWebhook": map[string]any{"reinvocationPolicy": "IfNeeded", "defaultTemplates": []any{}},
		"global": map[string]any{
			"imagePullPolicy": "Always", "imagePullSecrets": []any{"regcred"}, "priorityClassName": "system-cluster-critical",
			"configValidation": false, "networkPolicy": map[string]any{"enabled": true},
			"proxy": map[string]any{"autoInject": "disabled"}, "variant": "distroless",
		},
	}
	prefixed := map[string]any{"pilot": map[string]any{}}
	for k, v := range istio {
		switch k {
		case "global", "sidecarInjectorWebhook", "pdb": // not pilot keys in Istio's chart
			prefixed[k] = v
		default:
			prefixed["pilot"].(map[string]any)[k] = v
		}
	}
	for name, vals := range map[string]map[string]any{"top level": istio, "pilot prefix": prefixed} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, Options{Values: vals})
			hpa := only[*autoscalingv2.HorizontalPodAutoscaler](t, r, "HorizontalPodAutoscaler")
			if *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 7 || len(hpa.Spec.Metrics) != 2 ||
				*hpa.Spec.Metrics[0].Resource.Target.AverageUtilization != 65 || *hpa.Spec.Metrics[1].Resource.Target.AverageUtilization != 75 ||
				hpa.Spec.Behavior == nil || *hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 60 {
				t.Errorf("HorizontalPodAutoscaler spec %+v", hpa.Spec)
			}
			dep := only[*appsv1.Deployment](t, r, "Deployment")
			if dep.Spec.Replicas != nil {
				t.Errorf("replicas %d set beside the autoscaler", *dep.Spec.Replicas)
			}
			ru := dep.Spec.Strategy.RollingUpdate
			if ru.MaxSurge.String() != "1" || ru.MaxUnavailable.String() != "10%" {
				t.Errorf("rolling update %s/%s, want 1/10%%", ru.MaxSurge.String(), ru.MaxUnavailable.String())
			}
			if dep.Labels["team"] != "mesh" || dep.Annotations["owner"] != "platform" {
				t.Errorf("Deployment labels %v annotations %v", dep.Labels, dep.Annotations)
			}
			pod := dep.Spec.Template.Spec
			ctr := pod.Containers[0]
			if ctr.ImagePullPolicy != corev1.PullAlways || pod.PriorityClassName != "system-cluster-critical" ||
				len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
				t.Errorf("pull policy %s, priority class %q, pull secrets %v", ctr.ImagePullPolicy, pod.PriorityClassName, pod.ImagePullSecrets)
			}
			if sp := ctr.SecurityContext.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccomp profile %v", sp)
			}
			args := strings.Join(ctr.Args, " ")
			for _, want := range []string{"--token-audiences=istio-ca,mesh", "--workload-cert-ttl=12h", "--max-workload-cert-ttl=48h", "--serving-dns-names=istiod.example.com", "--root-grace-percentile=25"} {
				if !strings.Contains(args, want) {
					t.Errorf("istiod args lack %s: %s", want, args)
				}
			}
			env := map[string]string{}
			for _, e := range ctr.Env {
				env[e.Name] = e.Value
			}
			if env["CLUSTER_ID"] != "east" || env["VALIDATION_WEBHOOK_CONFIG_NAME"] != "" {
				t.Errorf("env CLUSTER_ID %q VALIDATION_WEBHOOK_CONFIG_NAME %q", env["CLUSTER_ID"], env["VALIDATION_WEBHOOK_CONFIG_NAME"])
			}
			if _, ok := env["PILOT_TRACE_SAMPLING"]; ok || !strings.Contains(r.Notes, "env.PILOT_TRACE_SAMPLING: istiod does not read it") {
				t.Errorf("an env istiod does not read must be left out and listed in NOTES:\n%s", r.Notes)
			}
			if !strings.Contains(r.Notes, "global.variant: ") {
				t.Errorf("NOTES does not list global.variant as ignored:\n%s", r.Notes)
			}
			svc := only[*corev1.Service](t, r, "Service")
			if svc.Annotations["svc"] != "a" || svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
				t.Errorf("Service annotations %v ipFamilyPolicy %v", svc.Annotations, svc.Spec.IPFamilyPolicy)
			}
			if sa := only[*corev1.ServiceAccount](t, r, "ServiceAccount"); sa.Annotations["iam"] != "role" {
				t.Errorf("ServiceAccount annotations %v", sa.Annotations)
			}
			if n := len(ofKind(r, "ValidatingWebhookConfiguration")); n != 0 {
				t.Errorf("global.configValidation false: %d validating webhooks", n)
			}
			if n := len(ofKind(r, "NetworkPolicy")); n != 1 {
				t.Errorf("global.networkPolicy.enabled: %d NetworkPolicies", n)
			}
			pdb := ofKind(r, "PodDisruptionBudget")
			if len(pdb) != 1 || fmt.Sprint(pdb[0].Object["spec"].(map[string]any)["minAvailable"]) != "2" ||
				pdb[0].Object["spec"].(map[string]any)["unhealthyPodEvictionPolicy"] != "IfHealthyBudget" {
				t.Errorf("PodDisruptionBudgets %v", pdb)
			}
			hooks := ofKind(r, "MutatingWebhookConfiguration")
			if len(hooks) != 1 || hooks[0].GetAnnotations()["hook"] != "b" {
				t.Fatalf("mutating webhook annotations: %v", hooks)
			}
			for _, w := range hooks[0].Object["webhooks"].([]any) {
				if p := w.(map[string]any)["reinvocationPolicy"]; p != "IfNeeded" {
					t.Errorf("webhook reinvocationPolicy %v", p)
				}
			}
			var injector *corev1.ConfigMap
			for _, u := range ofKind(r, "ConfigMap") {
				if u.GetName() == "istio-sidecar-injector" {
					obj, err := toTyped(u)
					if err != nil {
						t.Fatal(err)
					}
					injector = obj.(*corev1.ConfigMap)
				}
			}
			if cfg := injector.Data["config"]; !strings.Contains(cfg, "policy: disabled") || !strings.Contains(cfg, "- sidecar") {
				t.Errorf("injector config (global.proxy.autoInject disabled, default templates): %s", cfg)
			}
		})
	}
}

// A key of Istio's chart that would weaken security fails the install and
// says why; it is never quietly ignored.
func TestIstioValuesThatWeakenSecurityAreRefused(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		vals map[string]any
		want string
	}{
		"privileged proxies":     {map[string]any{"global": map[string]any{"proxy": map[string]any{"privileged": true}}}, "global.proxy.privileged"},
		"core dumps":             {map[string]any{"global": map[string]any{"proxy": map[string]any{"enableCoreDump": true}}}, "enableCoreDump"},
		"first-party tokens":     {map[string]any{"global": map[string]any{"jwtPolicy": "first-party-jwt"}}, "first-party-jwt is refused"},
		"unconfined istiod":      {map[string]any{"pilot": map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}}}, "seccompProfile.type: Unconfined is refused"},
		"unconfined proxies":     {map[string]any{"global": map[string]any{"proxy": map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}}}}, "global.proxy.seccompProfile.type"},
		"xDS without auth":       {map[string]any{"pilot": map[string]any{"env": map[string]any{"XDS_AUTH": "false"}}}, "XDS_AUTH=false is refused"},
		"xDS without identity":   {map[string]any{"env": map[string]any{"PILOT_ENABLE_XDS_IDENTITY_CHECK": false}}, "PILOT_ENABLE_XDS_IDENTITY_CHECK=false is refused"},
		"no trust domain check":  {map[string]any{"env": map[string]any{"PILOT_SKIP_VALIDATE_TRUST_DOMAIN": "true"}}, "PILOT_SKIP_VALIDATE_TRUST_DOMAIN=true is refused"},
		"impersonating nodes":    {map[string]any{"env": map[string]any{"CA_TRUSTED_NODE_ACCOUNTS": "istio-system/ztunnel"}}, "CA_TRUSTED_NODE_ACCOUNTS"},
		"first-party env":        {map[string]any{"env": map[string]any{"JWT_POLICY": "first-party-jwt"}}, "JWT_POLICY=first-party-jwt is refused"},
		"another istioNamespace": {map[string]any{"global": map[string]any{"istioNamespace": "mesh"}}, `global.istioNamespace is "mesh"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(Options{Values: tc.vals})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v; want an error with %q", err, tc.want)
			}
		})
	}
	// The safe values of the same keys install.
	for _, vals := range []map[string]any{
		{"env": map[string]any{"XDS_AUTH": "true", "PILOT_ENABLE_XDS_IDENTITY_CHECK": "true", "JWT_POLICY": "third-party-jwt"}},
		{"global": map[string]any{"jwtPolicy": "third-party-jwt", "istioNamespace": DefaultNamespace, "proxy": map[string]any{"privileged": false, "enableCoreDump": false}}},
	} {
		if _, err := Render(Options{Values: vals}); err != nil {
			t.Errorf("render %v: %v", vals, err)
		}
	}
}
