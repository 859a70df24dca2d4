package inject

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatewayPod is the gateway chart's pod in short: its own istio-proxy with
// image auto and the gateway template asked for.
func gatewayPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "ingress", Namespace: "istio-ingress",
			Labels:      map[string]string{"app": "istio-ingressgateway", "istio": "ingressgateway", LabelInject: "true"},
			Annotations: map[string]string{AnnotationTemplates: TemplateGateway},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "istio-ingressgateway",
			Containers: []corev1.Container{{
				Name: ProxyContainerName, Image: AutoImage,
				Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: envoyPromPort, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"),
				}},
			}},
		},
	}
}

func mustMutate(t *testing.T, pod *corev1.Pod, p Params) *corev1.Pod {
	t.Helper()
	got, res, err := Mutate(pod, p)
	if err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	if !res.Injected {
		t.Fatalf("not injected: %s", res.Reason)
	}
	return got
}

func TestGatewayTemplateBuildsARouter(t *testing.T) {
	p := defaultParams(t)
	got := mustMutate(t, gatewayPod(), p)
	if len(got.Spec.InitContainers) != 0 {
		t.Errorf("init containers %v, want none: a gateway captures no traffic", got.Spec.InitContainers)
	}
	if n := countProxies(got); n != 1 {
		t.Fatalf("%d istio-proxy containers, want the pod's one", n)
	}
	proxy := proxyOf(got)
	if proxy.Image != p.Values.ProxyImage() {
		t.Errorf("image %q, want %q in place of auto", proxy.Image, p.Values.ProxyImage())
	}
	if !slices.Equal(proxy.Args[:2], []string{"proxy", "router"}) {
		t.Errorf("args %v, want proxy router", proxy.Args)
	}
	if v, _ := envValue(proxy, "ISTIO_META_POD_PORTS"); !strings.Contains(v, `"containerPort":15090`) {
		t.Errorf("ISTIO_META_POD_PORTS %q does not list the pod's own istio-proxy port", v)
	}
	if lim := proxy.Resources.Limits.Memory(); lim.String() != "1Gi" {
		t.Errorf("memory limit %s: the pod's resources must stay", lim)
	}
	if got.Labels[LabelTLSMode] != "" {
		t.Errorf("a gateway gets no %s label", LabelTLSMode)
	}
	sc := got.Spec.SecurityContext
	if sc == nil || !slices.Equal(sc.Sysctls, []corev1.Sysctl{{Name: unprivilegedPortSysctl, Value: "0"}}) {
		t.Errorf("pod security context %+v, want the unprivileged port sysctl", sc)
	}
	var st status
	if err := json.Unmarshal([]byte(got.Annotations[AnnotationStatus]), &st); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Containers, []string{ProxyContainerName}) || len(st.InitContainers) != 0 {
		t.Errorf("status %+v", st)
	}
}

// The template is laid under the pod's own container: what the pod sets
// wins, what it leaves out comes from the template.
func TestGatewayPodContainerWins(t *testing.T) {
	pod := gatewayPod()
	c := &pod.Spec.Containers[0]
	c.Image = "registry.example.com/proxyv2:custom"
	c.Env = []corev1.EnvVar{{Name: "ISTIO_META_ROUTER_MODE", Value: "sni-dnat"}, {Name: "CA_ADDR", Value: "ca.example.com:15012"}}
	c.SecurityContext = &corev1.SecurityContext{RunAsUser: ptrTo[int64](2000)}
	got := proxyOf(mustMutate(t, pod, defaultParams(t)))
	if got.Image != "registry.example.com/proxyv2:custom" {
		t.Errorf("image %q, want the pod's", got.Image)
	}
	if v, _ := envValue(got, "CA_ADDR"); v != "ca.example.com:15012" {
		t.Errorf("CA_ADDR %q, want the pod's", v)
	}
	if v, _ := envValue(got, "ISTIO_META_ROUTER_MODE"); v != "sni-dnat" {
		t.Errorf("ISTIO_META_ROUTER_MODE %q, want the pod's", v)
	}
	if _, ok := envValue(got, "PROXY_CONFIG"); !ok {
		t.Error("the template's PROXY_CONFIG is gone")
	}
	sc := got.SecurityContext
	if *sc.RunAsUser != 2000 || *sc.RunAsGroup != proxyUID || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context %+v: want the pod's user over the restricted context", sc)
	}
}

// A pod with no istio-proxy of its own gets the template's.
func TestGatewayWithoutItsOwnContainer(t *testing.T) {
	pod := appPod(map[string]string{AnnotationTemplates: TemplateGateway}, nil)
	got := mustMutate(t, pod, defaultParams(t))
	if n := countProxies(got); n != 1 || got.Spec.Containers[len(got.Spec.Containers)-1].Name != ProxyContainerName {
		t.Fatalf("containers %v, want istio-proxy last", got.Spec.Containers)
	}
	if got.Annotations[AnnotationDefaultContainer] != "app" {
		t.Errorf("default container %q", got.Annotations[AnnotationDefaultContainer])
	}
}

func TestGatewayRefusals(t *testing.T) {
	cases := map[string]struct {
		edit func(*corev1.Pod)
		want error
	}{
		"a second istio-proxy": {
			edit: func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) },
			want: ErrConflict,
		},
		"istio-proxy among the init containers": {
			edit: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: ProxyContainerName, Image: AutoImage}}
			},
			want: ErrConflict,
		},
		"a volume named like one the template adds": {
			edit: func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{emptyDir(volToken, "")} },
			want: ErrConflict,
		},
		"a resource name a merge would read as a directive": {
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Limits["$patch"] = resource.MustParse("1")
			},
			want: errOwnProxy,
		},
		"more variables than the merge takes": {
			edit: func(p *corev1.Pod) {
				for i := range maxOwnListItems + 1 {
					p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "E" + strconv.Itoa(i)})
				}
			},
			want: errOwnProxy,
		},
		"the sidecar template with the pod's own istio-proxy": {
			edit: func(p *corev1.Pod) { p.Annotations[AnnotationTemplates] = TemplateSidecar },
			want: ErrConflict,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := gatewayPod()
			tc.edit(pod)
			if _, err := Inject(pod, defaultParams(t)); !errors.Is(err, tc.want) {
				t.Fatalf("Inject error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestGatewayWithAnotherTemplateIsRefused(t *testing.T) {
	for _, list := range []string{"gateway,sidecar", "sidecar, gateway", "gateway,grpc-agent"} {
		pod := gatewayPod()
		pod.Annotations[AnnotationTemplates] = list
		_, err := Inject(pod, defaultParams(t))
		var ae *AnnotationError
		if !errors.As(err, &ae) || ae.Annotation != AnnotationTemplates || !strings.Contains(err.Error(), "cannot be combined") {
			t.Errorf("%s: error = %v, want one naming %s", list, err, AnnotationTemplates)
		}
	}
}

// /inject builds the gateway for a pod whose annotation asks for it.
func TestHandlerInjectsGateway(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t))
	pod := gatewayPod()
	out := decodeResponse(t, post(t, h, "/inject", "application/json", reviewBody(t, admission.APIVersionV1, pod)))
	if !out.Response.Allowed || out.Response.Patch == nil {
		t.Fatalf("response %+v", out.Response)
	}
	orig, _ := json.Marshal(pod)
	var ops []patchOp
	if err := json.Unmarshal(out.Response.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	patched, err := applyPatch(orig, toOps(ops))
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	proxy := proxyOf(&got)
	if countProxies(&got) != 1 || proxy.Image == AutoImage || proxy.Args[1] != "router" || len(got.Spec.InitContainers) != 0 {
		t.Errorf("not a gateway: %+v", got.Spec)
	}

	pod.Annotations[AnnotationTemplates] = "gateway,sidecar"
	out = decodeResponse(t, post(t, h, "/inject", "application/json", reviewBody(t, admission.APIVersionV1, pod)))
	if r := out.Response; r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, AnnotationTemplates) {
		t.Errorf("gateway,sidecar: response %+v, want a denial naming %s", r, AnnotationTemplates)
	}
}

// FuzzGatewayOwnContainer lays arbitrary istio-proxy containers of a pod
// over the gateway template. Nothing may panic; an injected pod has one
// istio-proxy and no init containers, and the patch gives the mutated pod.
func FuzzGatewayOwnContainer(f *testing.F) {
	f.Add(`{"name":"istio-proxy","image":"auto","ports":[{"containerPort":15090,"protocol":"TCP","name":"http-envoy-prom"}]}`)
	f.Add(`{"name":"istio-proxy","image":"auto","env":[{"name":"CA_ADDR","value":"x"},{"name":"CA_ADDR","value":"y"}],"resources":{"limits":{"$patch":"1"}}}`)
	f.Add(`{"name":"istio-proxy","securityContext":{"capabilities":{"add":["NET_ADMIN"]}},"volumeMounts":[{"name":"istio-token","mountPath":"/etc/istio/proxy"}],"readinessProbe":{"exec":{"command":["true"]}}}`)
	p := Params{}
	{
		snap := NewStore().Load()
		p = Params{Namespace: "default", Config: snap.Config, Values: snap.Values}
	}
	f.Fuzz(func(t *testing.T, container string) {
		var own corev1.Container
		if err := json.Unmarshal([]byte(container), &own); err != nil {
			return
		}
		own.Name = ProxyContainerName
		pod := gatewayPod()
		pod.Spec.Containers = []corev1.Container{own}
		mutated, res, err := Mutate(pod, p)
		if err != nil || !res.Injected {
			return
		}
		if n := countProxies(mutated); n != 1 || len(mutated.Spec.InitContainers) != 0 {
			t.Fatalf("%d istio-proxy, init containers %v", n, mutated.Spec.InitContainers)
		}
		res, err = Inject(pod, p)
		if err != nil {
			t.Fatalf("Mutate succeeded but Inject failed: %v", err)
		}
		orig, _ := json.Marshal(pod)
		want, _ := json.Marshal(mutated)
		patched, err := applyPatch(orig, res.Patch)
		if err != nil {
			t.Fatalf("apply patch: %v", err)
		}
		if !jsonEqual(t, want, patched) {
			t.Fatalf("the patch does not give the mutated pod")
		}
	})
}
