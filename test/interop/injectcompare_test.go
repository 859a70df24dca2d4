package interop

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	gomodjsonpatch "gomodules.xyz/jsonpatch/v2"
	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Names Istio's templates use that Bulwark leaves out on purpose.
const (
	istioCRLVolume = "istio-ca-crl"
)

func applyPatch(pod *corev1.Pod, ops []gomodjsonpatch.Operation) (*corev1.Pod, error) {
	doc, err := json.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encode pod: %w", err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encode patch: %w", err)
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, fmt.Errorf("decode patch: %w", err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, fmt.Errorf("apply patch: %w", err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(out, &patched); err != nil {
		return nil, fmt.Errorf("decode patched pod: %w", err)
	}
	return &patched, nil
}

// cmpOpts compares quantities by value ("1Gi" parsed or decoded is the
// same quantity) and treats nil and empty maps and slices alike, since a
// round trip through JSON does not keep the difference.
var cmpOpts = []cmp.Option{
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
	cmp.FilterValues(func(a, b any) bool { return isEmpty(a) && isEmpty(b) }, cmp.Comparer(func(_, _ any) bool { return true })),
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case map[string]string:
		return len(x) == 0
	case []corev1.EnvVar:
		return len(x) == 0
	case []corev1.VolumeMount:
		return len(x) == 0
	case []corev1.Container:
		return len(x) == 0
	case []corev1.Volume:
		return len(x) == 0
	case []corev1.LocalObjectReference:
		return len(x) == 0
	case []string:
		return len(x) == 0
	case corev1.ResourceList:
		return len(x) == 0
	}
	return false
}

// comparePods reports every field on which the two injected pods differ,
// one error per object, each with a go-cmp diff (-istio +bulwark).
func comparePods(t *testing.T, istio, ours *corev1.Pod) {
	t.Helper()
	comparePodsAs(t, "istio", "bulwark", istio, ours)
}

func comparePodsAs(t *testing.T, aName, bName string, istio, ours *corev1.Pod) {
	t.Helper()
	diff := func(what string, a, b any) {
		t.Helper()
		if d := cmp.Diff(a, b, cmpOpts...); d != "" {
			t.Errorf("%s differs (-%s +%s):\n%s", what, aName, bName, d)
		}
	}
	diff("labels", istio.Labels, ours.Labels)
	ia, oa := maps2(istio.Annotations), maps2(ours.Annotations)
	is, os := ia[statusAnnotation], oa[statusAnnotation]
	delete(ia, statusAnnotation)
	delete(oa, statusAnnotation)
	diff("annotations", ia, oa)
	diff("status annotation", parseStatus(t, is), parseStatus(t, os))

	for _, list := range []struct {
		name string
		a, b []corev1.Container
	}{
		{"initContainers", istio.Spec.InitContainers, ours.Spec.InitContainers},
		{"containers", istio.Spec.Containers, ours.Spec.Containers},
	} {
		an, bn := containerNames(list.a), containerNames(list.b)
		if !slices.Equal(an, bn) {
			t.Errorf("%s: %s has %v, %s has %v", list.name, aName, an, bName, bn)
			continue
		}
		for i := range list.a {
			diff(fmt.Sprintf("%s[%s]", list.name, list.a[i].Name), list.a[i], list.b[i])
		}
	}
	diff("volumes", istio.Spec.Volumes, ours.Spec.Volumes)
	rest := func(p *corev1.Pod) corev1.PodSpec {
		s := *p.Spec.DeepCopy()
		s.InitContainers, s.Containers, s.Volumes = nil, nil, nil
		return s
	}
	diff("the rest of the pod spec", rest(istio), rest(ours))
}

const statusAnnotation = "sidecar.istio.io/status"

type injectionStatus struct {
	InitContainers   []string `json:"initContainers"`
	Containers       []string `json:"containers"`
	Volumes          []string `json:"volumes"`
	ImagePullSecrets []string `json:"imagePullSecrets"`
	Revision         string   `json:"revision"`
}

func parseStatus(t *testing.T, s string) injectionStatus {
	t.Helper()
	var st injectionStatus
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		t.Errorf("status annotation %q: %v", s, err)
	}
	return st
}

func maps2(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func containerNames(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// normalizeEncoding rewrites the values that are documents inside an
// environment variable to one canonical form on both sides: the same
// document may be written with other whitespace or key order.
func normalizeEncoding(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for ci := range list {
			c := &list[ci]
			for i := range c.Env {
				e := &c.Env[i]
				switch e.Name {
				case "PROXY_CONFIG":
					e.Value = effectiveProxyConfig(t, e.Value)
				case "ISTIO_META_POD_PORTS", "ISTIO_KUBE_APP_PROBERS", "ISTIO_PROMETHEUS_ANNOTATIONS":
					e.Value = canonicalJSON(t, e.Name, e.Value)
				}
			}
		}
	}
}

// effectiveProxyConfig is the ProxyConfig pilot-agent ends up with: the
// variable merged over Istio's defaults. Istio's injector writes only the
// fields that differ from its defaults and Bulwark writes the fields it
// sets, so the variables differ as text and must agree once merged.
func effectiveProxyConfig(t *testing.T, v string) string {
	t.Helper()
	pc, err := mesh.MergeProxyConfig(v, mesh.DefaultProxyConfig())
	if err != nil {
		t.Errorf("PROXY_CONFIG %q: %v", v, err)
		return v
	}
	b, err := protojson.MarshalOptions{}.Marshal(pc)
	if err != nil {
		t.Fatal(err)
	}
	return canonicalJSON(t, "PROXY_CONFIG", string(b))
}

func canonicalJSON(t *testing.T, name, v string) string {
	t.Helper()
	var x any
	if err := json.Unmarshal([]byte(v), &x); err != nil {
		t.Errorf("%s is not JSON: %v: %q", name, err, v)
		return v
	}
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dropIstioCRL removes the istio-ca-crl volume and its mount from Istio's
// pod. Deliberate: Bulwark's CA publishes no revocation list ConfigMap, so
// the injector does not mount one (Istio's volume is optional, so its pods
// start without it too).
func dropIstioCRL(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == istioCRLVolume })
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			list[i].VolumeMounts = slices.DeleteFunc(list[i].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == istioCRLVolume })
		}
	}
	if s, ok := pod.Annotations[statusAnnotation]; ok {
		st := parseStatus(t, s)
		st.Volumes = slices.DeleteFunc(st.Volumes, func(n string) bool { return n == istioCRLVolume })
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		pod.Annotations[statusAnnotation] = string(b)
	}
}

// defaultVolumeSources gives a volume without a source the emptyDir
// kube-apiserver defaults it to: Istio's templates write "emptyDir:" with
// no value for the socket and certificate volumes, which decodes as no
// source at all; Bulwark writes the emptyDir.
func defaultVolumeSources(pod *corev1.Pod) {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].VolumeSource == (corev1.VolumeSource{}) {
			pod.Spec.Volumes[i].EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
	}
}

// dropOverrides removes proxy.istio.io/overrides from Istio's pod.
// Deliberate: Istio records there the app containers a template touched so
// that it can inject the pod again; Bulwark never injects a pod twice (an
// injected pod is left as it is), so it keeps no such record.
func dropOverrides(pod *corev1.Pod) {
	delete(pod.Annotations, "proxy.istio.io/overrides")
}

// dropAgentSecurityContext clears the security context of Bulwark's
// proxyless gRPC agent when Istio's has none. Deliberate: Istio's
// grpc-agent template gives the agent no security context at all, Bulwark
// gives it the same restricted one as every istio-proxy (non-root 1337,
// read-only root, no privilege escalation, all capabilities dropped).
func dropAgentSecurityContext(t *testing.T, istio, ours *corev1.Pod) {
	t.Helper()
	ip, op := findProxy(istio), findProxy(ours)
	if ip == nil || op == nil || ip.SecurityContext != nil {
		return
	}
	want := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false), Privileged: ptr(false), ReadOnlyRootFilesystem: ptr(true),
		RunAsNonRoot: ptr(true), RunAsUser: ptr[int64](1337), RunAsGroup: ptr[int64](1337),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if d := cmp.Diff(want, op.SecurityContext); d != "" {
		t.Errorf("grpc agent security context is not the restricted one (-want +got):\n%s", d)
	}
	op.SecurityContext = nil
}

func findProxy(pod *corev1.Pod) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == "istio-proxy" {
				return &list[i]
			}
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// proxyConfigOf returns the effective ProxyConfig of an injected pod.
func proxyConfigOf(t *testing.T, pod *corev1.Pod) *meshv1alpha1.ProxyConfig {
	t.Helper()
	c := findProxy(pod)
	if c == nil {
		t.Fatal("no istio-proxy")
	}
	for _, e := range c.Env {
		if e.Name == "PROXY_CONFIG" {
			pc, err := mesh.MergeProxyConfig(e.Value, mesh.DefaultProxyConfig())
			if err != nil {
				t.Fatal(err)
			}
			return pc
		}
	}
	t.Fatal("no PROXY_CONFIG")
	return nil
}
