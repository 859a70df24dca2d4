package inject

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecide(t *testing.T) {
	enabled := "policy: enabled\n"
	disabled := "policy: disabled\n"
	selectors := "policy: %s\nneverInjectSelector:\n- matchLabels: {team: legacy}\nalwaysInjectSelector:\n- matchLabels: {mesh: enabled}\n"
	cases := map[string]struct {
		config    string
		namespace string
		nsLabels  map[string]string
		labels    map[string]string
		annos     map[string]string
		hostNet   bool
		want      bool
		reason    string
	}{
		"a plain pod is injected under policy enabled":               {config: enabled, want: true, reason: ReasonPolicyEnabled},
		"a plain pod is left alone under policy disabled":            {config: disabled, want: false, reason: ReasonPolicyDisabled},
		"host networking wins over an explicit opt-in":               {config: enabled, hostNet: true, labels: map[string]string{LabelInject: "true"}, want: false, reason: ReasonHostNetwork},
		"kube-system wins over an explicit opt-in":                   {config: enabled, namespace: "kube-system", labels: map[string]string{LabelInject: "true"}, want: false, reason: ReasonSystemNamespace},
		"kube-public is never injected":                              {config: enabled, namespace: "kube-public", want: false, reason: ReasonSystemNamespace},
		"kube-node-lease is never injected":                          {config: enabled, namespace: "kube-node-lease", want: false, reason: ReasonSystemNamespace},
		"a namespace labelled disabled is never injected":            {config: enabled, nsLabels: map[string]string{"istio-injection": "disabled"}, want: false, reason: ReasonNamespaceOff},
		"istiod's own pods are never injected":                       {config: enabled, labels: map[string]string{"app": "istiod", LabelInject: "true"}, want: false, reason: ReasonIstiod},
		"an already injected pod is not injected again":              {config: enabled, annos: map[string]string{AnnotationStatus: "{}"}, want: false, reason: ReasonAlreadyInjected},
		"the label opts in under policy disabled":                    {config: disabled, labels: map[string]string{LabelInject: "true"}, want: true, reason: ReasonPodEnabled},
		"the annotation opts in under policy disabled":               {config: disabled, annos: map[string]string{AnnotationInject: "on"}, want: true, reason: ReasonPodEnabled},
		"the label opts out under policy enabled":                    {config: enabled, labels: map[string]string{LabelInject: "false"}, want: false, reason: ReasonPodDisabled},
		"the label false wins over the annotation true":              {config: enabled, labels: map[string]string{LabelInject: "false"}, annos: map[string]string{AnnotationInject: "true"}, want: false, reason: ReasonPodDisabled},
		"the label true wins over the annotation false":              {config: disabled, labels: map[string]string{LabelInject: "TRUE"}, annos: map[string]string{AnnotationInject: "false"}, want: true, reason: ReasonPodEnabled},
		"an unrecognised value opts out as Istio does":               {config: enabled, annos: map[string]string{AnnotationInject: "maybe"}, want: false, reason: ReasonPodDisabled},
		"neverInjectSelector excludes under policy enabled":          {config: fmt.Sprintf(selectors, "enabled"), labels: map[string]string{"team": "legacy"}, want: false, reason: ReasonNeverSelector},
		"alwaysInjectSelector includes under policy disabled":        {config: fmt.Sprintf(selectors, "disabled"), labels: map[string]string{"mesh": "enabled"}, want: true, reason: ReasonAlwaysSelector},
		"neverInjectSelector is checked before alwaysInjectSelector": {config: fmt.Sprintf(selectors, "disabled"), labels: map[string]string{"mesh": "enabled", "team": "legacy"}, want: false, reason: ReasonNeverSelector},
		"an explicit opt-in wins over neverInjectSelector":           {config: fmt.Sprintf(selectors, "enabled"), labels: map[string]string{"team": "legacy", LabelInject: "true"}, want: true, reason: ReasonPodEnabled},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, _, err := ParseConfig([]byte(tc.config), nil)
			if err != nil {
				t.Fatal(err)
			}
			ns := tc.namespace
			if ns == "" {
				ns = "default"
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Labels: tc.labels, Annotations: tc.annos},
				Spec:       corev1.PodSpec{HostNetwork: tc.hostNet},
			}
			got, reason := decide(pod, ns, tc.nsLabels, cfg)
			if got != tc.want || reason != tc.reason {
				t.Errorf("decide = %t, %q; want %t, %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}
