package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// `istiod migrate check` on a real apiserver: Istio's istiod with its
// root in istio-ca-secret and a DestinationRule whose load balancing
// Bulwark ignores is blocked (exit 1) until that is allowed, then nothing
// blocks the move (exit 0); another trust domain for Bulwark blocks it
// (exit 1, the finding named). `istiod ca
// status` names the pod Istio's injector made, whose proxy lacks PCDS.
func TestMigrateCheckAndCAStatusOnACluster(t *testing.T) {
	env := testenv.Get(t)
	client := env.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp, apps := env.Namespace(t), env.Namespace(t)

	labels := map[string]string{"app": "istiod", "istio.io/rev": "default"}
	if _, err := client.AppsV1().Deployments(cp).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "istio/pilot"}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := catest.NewRoot(t)
	if _, err := client.CoreV1().Secrets(cp).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-ca-secret"},
		Data:       map[string][]byte{"ca-cert.pem": root.CertPEM, "ca-key.pem": root.KeyPEM, "cert-chain.pem": {}, "root-cert.pem": {}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(apps).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy",
			Labels:      map[string]string{"service.istio.io/canonical-name": "app", "istio.io/rev": "default"},
			Annotations: map[string]string{"sidecar.istio.io/status": `{"revision":"default"}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "istio-proxy", Image: "proxyv2"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	crds, err := filepath.Glob("../../charts/istiod/crds/*.yaml")
	if err != nil || len(crds) == 0 {
		t.Fatalf("chart CRDs: %v", err)
	}
	env.InstallCRDs(t, crds...)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
		"metadata": map[string]any{"name": "reviews", "namespace": apps},
		"spec":     map[string]any{"host": "reviews", "trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": "LEAST_REQUEST"}}},
	}}
	gvr := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}
	if _, err := dyn.Resource(gvr).Namespace(apps).Create(ctx, dr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	check := func(extra ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		args := append([]string{"migrate", "check", "--kubeconfig", env.Kubeconfig, "--namespace", cp}, extra...)
		code := run(args, noEnv, &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	// The DestinationRule's load balancing is not honoured: listed once,
	// in the report, and blocking unless allowed.
	if code, out := check(); code != exitError || !strings.Contains(out, "BLOCKS 1 Istio objects are not honoured") ||
		!strings.Contains(out, "DestinationRule.networking.istio.io "+apps+"/reviews: spec.trafficPolicy.loadBalancer") ||
		strings.Contains(out, "Istio configuration not honoured") {
		t.Errorf("migrate check with an object not honoured: exit %d\n%s", code, out)
	}
	if code, out := check("--allow-unsupported"); code != exitOK || !strings.Contains(out, "nothing blocks the move") ||
		!strings.Contains(out, "Bulwark would sign with the key in Secret "+cp+"/istio-ca-secret") ||
		!strings.Contains(out, apps+"/legacy (default)") {
		t.Errorf("migrate check: exit %d\n%s", code, out)
	}
	if code, out := check("--allow-unsupported", "--trust-domain", "other.example"); code != exitError || !strings.Contains(out, "BLOCKS Istio's istiod "+cp+"/istiod has trust domain cluster.local") {
		t.Errorf("migrate check for another trust domain: exit %d\n%s", code, out)
	}
	if code, out := check("--no-such-flag"); code != exitUsage {
		t.Errorf("a bad flag: exit %d\n%s", code, out)
	}

	var stdout, stderr bytes.Buffer
	code := run([]string{"ca", "status", "--kubeconfig", env.Kubeconfig, "--namespace", cp}, noEnv, &stdout, &stderr)
	if out := stdout.String(); code != exitOK || !strings.Contains(out, "pods whose proxy does not take the trust bundle over xDS") ||
		!strings.Contains(out, apps+"/legacy (default)") {
		t.Errorf("ca status: exit %d\n%s%s", code, out, stderr.String())
	}
}
