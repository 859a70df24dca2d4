package inject

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestInjectLeavesItsInputAlone(t *testing.T) {
	pod := appPod(map[string]string{"prometheus.io/scrape": "true"}, map[string]string{"app": "a"})
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: httpProbe("/ready", 8080)}
	before := pod.DeepCopy()
	if _, err := Inject(pod, defaultParams(t)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pod, before) {
		t.Error("Inject modified the pod it was given")
	}
}

// Injecting an injected pod again is a no-op: the apiserver may call the
// webhook twice (reinvocationPolicy IfNeeded).
func TestInjectIsIdempotent(t *testing.T) {
	p := defaultParams(t)
	first, res, err := Mutate(appPod(nil, nil), p)
	if err != nil || !res.Injected {
		t.Fatalf("first injection: %v %+v", err, res)
	}
	again, err := Inject(first, p)
	if err != nil || again.Injected || len(again.Patch) != 0 || again.Reason != ReasonAlreadyInjected {
		t.Fatalf("second injection = %+v, %v", again, err)
	}
}

func TestInjectNeedsConfig(t *testing.T) {
	if _, err := Inject(appPod(nil, nil), Params{}); err == nil {
		t.Error("no error without config")
	}
	if _, err := Inject(nil, defaultParams(t)); err == nil {
		t.Error("no error without pod")
	}
}

func TestConflictingVolumeIsDenied(t *testing.T) {
	pod := appPod(nil, nil)
	pod.Spec.Volumes = []corev1.Volume{{Name: volToken}}
	if _, err := Inject(pod, defaultParams(t)); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
}

func TestStatusAnnotationMatchesWhatWasAdded(t *testing.T) {
	for name, annos := range map[string]map[string]string{
		"the sidecar template":    nil,
		"a native sidecar":        {AnnotationNativeSidecar: "true"},
		"without traffic capture": {AnnotationProxyConfig: "interceptionMode: NONE"},
		"the grpc-agent template": {AnnotationTemplates: TemplateGRPCAgent},
	} {
		t.Run(name, func(t *testing.T) {
			pod, _, err := Mutate(appPod(annos, nil), defaultParams(t))
			if err != nil {
				t.Fatal(err)
			}
			var st status
			if err := json.Unmarshal([]byte(pod.Annotations[AnnotationStatus]), &st); err != nil {
				t.Fatal(err)
			}
			for _, c := range append(st.InitContainers, st.Containers...) {
				if findContainer(pod.Spec.InitContainers, c) == nil && findContainer(pod.Spec.Containers, c) == nil {
					t.Errorf("status names %s, which the pod lacks", c)
				}
			}
			for _, v := range st.Volumes {
				found := false
				for _, pv := range pod.Spec.Volumes {
					found = found || pv.Name == v
				}
				if !found {
					t.Errorf("status names volume %s, which the pod lacks", v)
				}
			}
			if st.Revision != "default" {
				t.Errorf("revision = %q", st.Revision)
			}
		})
	}
}
