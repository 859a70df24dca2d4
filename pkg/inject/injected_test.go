package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// InjectedProxyOf tells pods Bulwark's injector made (PCDS on) from those
// with PCDS off, and from pods without an injected proxy.
func TestInjectedProxyOf(t *testing.T) {
	mutated := func(t *testing.T, values string, annos, labels map[string]string) *corev1.Pod {
		t.Helper()
		cfg, vals, err := ParseConfig(nil, []byte(values))
		if err != nil {
			t.Fatal(err)
		}
		pod, res, err := Mutate(appPod(annos, labels), Params{Namespace: "default", Config: cfg, Values: vals})
		if err != nil || !res.Injected {
			t.Fatalf("inject: %v (%s)", err, res.Reason)
		}
		return pod
	}
	for name, tc := range map[string]struct {
		pod      func(t *testing.T) *corev1.Pod
		injected bool
		want     InjectedProxy
	}{
		"injected by default": {
			pod:      func(t *testing.T) *corev1.Pod { return mutated(t, "", nil, nil) },
			injected: true, want: InjectedProxy{Revision: "default", PCDS: true},
		},
		"injected by a revision": {
			pod:      func(t *testing.T) *corev1.Pod { return mutated(t, `{"revision":"bulwark"}`, nil, nil) },
			injected: true, want: InjectedProxy{Revision: "bulwark", PCDS: true},
		},
		"PCDS off in the mesh": {
			pod: func(t *testing.T) *corev1.Pod {
				return mutated(t, `{"meshConfig":{"defaultConfig":{"proxyMetadata":{"PROXY_CONFIG_XDS_AGENT":"false"}}}}`, nil, nil)
			},
			injected: true, want: InjectedProxy{Revision: "default"},
		},
		"PCDS off for the pod": {
			pod: func(t *testing.T) *corev1.Pod {
				return mutated(t, "", map[string]string{AnnotationProxyConfig: `{"proxyMetadata":{"PROXY_CONFIG_XDS_AGENT":"0"}}`}, nil)
			},
			injected: true, want: InjectedProxy{Revision: "default"},
		},
		"PCDS unreadable counts as off": {
			pod: func(t *testing.T) *corev1.Pod {
				return mutated(t, "", map[string]string{AnnotationProxyConfig: `{"proxyMetadata":{"PROXY_CONFIG_XDS_AGENT":"yes"}}`}, nil)
			},
			injected: true, want: InjectedProxy{Revision: "default"},
		},
		"not injected": {
			pod: func(*testing.T) *corev1.Pod { return appPod(nil, nil) },
		},
		"a status without a proxy": {
			pod: func(*testing.T) *corev1.Pod {
				return appPod(map[string]string{AnnotationStatus: `{"revision":"default"}`}, nil)
			},
		},
		"revision from the annotation when the status has none": {
			pod: func(t *testing.T) *corev1.Pod {
				p := mutated(t, `{"revision":"1-24"}`, nil, nil)
				p.Annotations[AnnotationStatus] = `{}`
				return p
			},
			injected: true, want: InjectedProxy{Revision: "1-24", PCDS: true},
		},
		"revision from the label when neither annotation has one": {
			pod: func(t *testing.T) *corev1.Pod {
				p := mutated(t, "", nil, nil)
				p.Annotations[AnnotationStatus] = `{}`
				delete(p.Annotations, AnnotationRevision)
				p.Labels[AnnotationRevision] = "1-25"
				return p
			},
			injected: true, want: InjectedProxy{Revision: "1-25", PCDS: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := InjectedProxyOf(tc.pod(t))
			if ok != tc.injected || got != tc.want {
				t.Errorf("InjectedProxyOf = %+v, %v; want %+v, %v", got, ok, tc.want, tc.injected)
			}
		})
	}
}
