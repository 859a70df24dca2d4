package inject

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestRewriteLifecycleHooks(t *testing.T) {
	cases := map[string]struct {
		hooks   corev1.Lifecycle
		exclude string
		want    corev1.Lifecycle
		probers string
	}{
		"HTTP and TCP hooks move to the agent": {
			hooks: corev1.Lifecycle{
				PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/started", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTPS}},
				PreStop:   &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			},
			want: corev1.Lifecycle{
				PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/app-lifecycle/app/poststartz", Port: intstr.FromInt32(15020), Scheme: corev1.URISchemeHTTP}},
				PreStop:   &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/app-lifecycle/app/prestopz", Port: intstr.FromInt32(15020)}},
			},
			probers: `{"/app-lifecycle/app/poststartz":{"httpGet":{"path":"/started","port":8080,"scheme":"HTTPS"}},"/app-lifecycle/app/prestopz":{"tcpSocket":{"port":8080}}}`,
		},
		"exec and sleep hooks are left alone": {
			hooks: corev1.Lifecycle{
				PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
				PreStop:   &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}},
			},
			want: corev1.Lifecycle{
				PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
				PreStop:   &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}},
			},
		},
		"a hook on a port that is not captured is left alone": {
			hooks:   corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
			exclude: "8080",
			want:    corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := appPod(nil, nil)
			pod.Spec.Containers[0].Lifecycle = tc.hooks.DeepCopy()
			probers, err := rewriteProbes(pod, 15020, &settings{includeInboundPorts: "*", excludeInboundPorts: tc.exclude})
			if err != nil {
				t.Fatal(err)
			}
			if probers != tc.probers {
				t.Errorf("probers = %s, want %s", probers, tc.probers)
			}
			got := pod.Spec.Containers[0].Lifecycle
			if got.String() != tc.want.String() {
				t.Errorf("hooks = %s, want %s", got, &tc.want)
			}
		})
	}
}

func TestMergeByKey(t *testing.T) {
	key := func(s string) string { return s[:1] }
	cases := map[string]struct {
		base, patch, want []string
	}{
		"new items come first":                   {[]string{"a1", "b1"}, []string{"x2", "y2"}, []string{"x2", "y2", "a1", "b1"}},
		"an item of patch replaces the same key": {[]string{"a1", "b1"}, []string{"b2"}, []string{"a1", "b2"}},
		"replaced items keep the patch's order":  {[]string{"a1", "b1", "c1"}, []string{"c2", "b2"}, []string{"a1", "c2", "b2"}},
		"empty base":                             {nil, []string{"x2"}, []string{"x2"}},
		"empty patch":                            {[]string{"a1"}, nil, []string{"a1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := mergeByKey(tc.base, tc.patch, key); !slices.Equal(got, tc.want) {
				t.Errorf("mergeByKey(%v, %v) = %v, want %v", tc.base, tc.patch, got, tc.want)
			}
		})
	}
}
