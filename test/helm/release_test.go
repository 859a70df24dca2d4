package helm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
)

// helmConfig is what `helm --kubeconfig <admin> -n ns` works with.
func helmConfig(t *testing.T, c *cluster, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, cacheDir := c.env.Kubeconfig, t.TempDir()
	flags.KubeConfig, flags.Namespace, flags.CacheDir = &kubeconfig, &ns, &cacheDir
	cfg := new(action.Configuration)
	// Helm's debug log is dropped: it may write after the test ends.
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatalf("helm init: %v", err)
	}
	return cfg
}

// writeInjectorConfig writes the keys of the injector ConfigMap that the
// Deployment mounts at --inject-config-dir into a directory, as the
// kubelet would.
func writeInjectorConfig(t *testing.T, client kubernetes.Interface, dep *appsv1.Deployment) string {
	t.Helper()
	var name string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "inject" && v.ConfigMap != nil {
			name = v.ConfigMap.Name
		}
	}
	if name == "" {
		t.Fatal("the Deployment mounts no injector ConfigMap (volume inject)")
	}
	cm, err := client.CoreV1().ConfigMaps(dep.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) == 0 {
		t.Fatalf("injector ConfigMap %s is empty", name)
	}
	dir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mustParse parses a release manifest.
func mustParse(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := ParseManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func labelNamespace(t *testing.T, client kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	ns, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitRootCert(t *testing.T, client kubernetes.Interface, ns string) string {
	t.Helper()
	var root string
	waitUntil(t, rootcert.ConfigMapName+" in "+ns, time.Minute, func() (bool, string) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), rootcert.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		root = cm.Data[rootcert.DataKey]
		return root != "", "empty " + rootcert.DataKey
	})
	return root
}

// waitWebhooksPatched waits until every webhook of the two configurations
// the Deployment tells istiod to keep trusts rootPEM and the validating
// ones fail closed.
func waitWebhooksPatched(t *testing.T, client kubernetes.Interface, dep *appsv1.Deployment, rootPEM, when string) {
	t.Helper()
	names := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		names[e.Name] = e.Value
	}
	mutating, validating := names["INJECTION_WEBHOOK_CONFIG_NAME"], names["VALIDATION_WEBHOOK_CONFIG_NAME"]
	if mutating == "" || validating == "" {
		t.Fatalf("the Deployment names webhooks %q and %q", mutating, validating)
	}
	adm := client.AdmissionregistrationV1()
	want := []byte(strings.TrimSpace(rootPEM))
	waitUntil(t, "webhook caBundles and failurePolicy "+when, time.Minute, func() (bool, string) {
		mwh, err := adm.MutatingWebhookConfigurations().Get(context.Background(), mutating, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range mwh.Webhooks {
			if !bytes.Equal(bytes.TrimSpace(w.ClientConfig.CABundle), want) {
				return false, mwh.Name + " " + w.Name + ": caBundle not the root"
			}
		}
		vwh, err := adm.ValidatingWebhookConfigurations().Get(context.Background(), validating, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range vwh.Webhooks {
			if !bytes.Equal(bytes.TrimSpace(w.ClientConfig.CABundle), want) {
				return false, vwh.Name + " " + w.Name + ": caBundle not the root"
			}
			if w.FailurePolicy == nil || *w.FailurePolicy != "Fail" {
				return false, vwh.Name + " " + w.Name + ": failurePolicy not Fail"
			}
		}
		return true, ""
	})
}

// createPod creates a plain pod and returns it as admitted (mutated).
func createPod(t *testing.T, client kubernetes.Interface, ns string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{"app": "app"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
	got, err := client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod in %s: %v", ns, err)
	}
	return got
}

// namespaceContents lists every object in ns as Kind/name, sorted.
func namespaceContents(t *testing.T, c *cluster, ns string) []string {
	t.Helper()
	lists, err := c.disco.ServerPreferredNamespacedResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	var out []string
	for _, list := range lists {
		for _, r := range list.APIResources {
			if !slices.Contains(r.Verbs, "list") || r.Kind == "Event" {
				continue
			}
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				t.Fatal(err)
			}
			items, err := c.dyn.Resource(gv.WithResource(r.Name)).Namespace(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list %s in %s: %v", r.Name, ns, err)
			}
			for _, it := range items.Items {
				out = append(out, r.Kind+"/"+it.GetName())
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}
