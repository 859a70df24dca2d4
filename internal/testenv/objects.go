package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestAnnotation on a namespace made by Namespace names the test it is for.
const TestAnnotation = "testenv.bulwark-mesh.io/test"

const requestTimeout = 30 * time.Second

// Namespace creates a namespace with a unique name for t, plus the
// "default" ServiceAccount a controller-manager would add, and deletes the
// namespace when t ends. Without a namespace controller the deleted
// namespace stays Terminating, which also refuses new objects in it.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	client := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: namespacePrefix(t.Name()),
			Annotations:  map[string]string{TestAnnotation: t.Name()},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testenv: create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		err := client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("testenv: delete namespace %s: %v", ns.Name, err)
		}
	})
	if err := ensureServiceAccount(ctx, client, ns.Name, "default"); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return ns.Name
}

// namespacePrefix turns a test name into a DNS label prefix; the apiserver
// appends a random suffix.
func namespacePrefix(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-")
	switch {
	case name == "":
		name = "t"
	case name[0] < 'a':
		name = "t-" + name
	}
	return name + "-"
}

// ServiceAccountToken returns a token from TokenRequest for the
// ServiceAccount ns/sa, creating the account if it does not exist. With
// audiences nil the token is for the apiserver itself. With boundPod non-nil
// the token is bound to that (already created) pod: it carries the pod's name
// and UID and stops authenticating once the pod is gone. The pod must run as
// sa, or the apiserver refuses to bind.
func (e *Env) ServiceAccountToken(t testing.TB, ns, sa string, audiences []string, boundPod *corev1.Pod) string {
	t.Helper()
	client := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := ensureServiceAccount(ctx, client, ns, sa); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}
	if boundPod != nil {
		if boundPod.UID == "" || boundPod.Namespace != ns {
			t.Fatalf("testenv: bound pod must be a pod created in namespace %s, got %s/%s uid %q",
				ns, boundPod.Namespace, boundPod.Name, boundPod.UID)
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: boundPod.Name, UID: boundPod.UID,
		}
	}
	resp, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testenv: token request for %s/%s: %v", ns, sa, err)
	}
	return resp.Status.Token
}

func ensureServiceAccount(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/%s: %w", ns, name, err)
	}
	return nil
}

// allowIssuerDiscovery lets unauthenticated clients read the OIDC discovery
// document and JWKS, as clusters that publish their issuer do: Kubernetes'
// own binding grants them only to ServiceAccounts. It waits until the
// authorizer has seen the binding.
func allowIssuerDiscovery(env *Env) error {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(env.Config))
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "testenv:service-account-issuer-discovery"},
		RoleRef: rbacv1.RoleRef{
			APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery",
		},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("allow OIDC discovery: %w", err)
	}
	url := env.Issuer + "/.well-known/openid-configuration"
	anonymous := env.HTTPClient()
	for {
		status, err := probe(ctx, anonymous, url, "")
		if err == nil && status == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("OIDC discovery %s not served anonymously: %w", url, err)
			}
			return fmt.Errorf("OIDC discovery %s not served anonymously: %s", url, status)
		case <-time.After(pollInterval):
		}
	}
}

// writeKubeconfig writes an admin kubeconfig next to the other run files.
// JSON is YAML, so this needs no kubeconfig library.
func writeKubeconfig(env *Env) error {
	env.Kubeconfig = filepath.Join(env.cluster.runDir, "kubeconfig")
	return kubeconfigFile(env, env.Kubeconfig, env.Config.BearerToken)
}

// KubeconfigForToken writes a kubeconfig for the API server that
// authenticates with token, for running a program (istiod) as that
// identity, and returns its path.
func (e *Env) KubeconfigForToken(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := kubeconfigFile(e, path, token); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeconfigFile writes a kubeconfig for env's API server with token.
// JSON is YAML, so encoding/json writes it.
func kubeconfigFile(env *Env, path, token string) error {
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "testenv",
		"clusters": []map[string]any{{
			"name":    "testenv",
			"cluster": map[string]any{"server": env.URL, "certificate-authority-data": env.CAPEM},
		}},
		"users": []map[string]any{{
			"name": "user",
			"user": map[string]any{"token": token},
		}},
		"contexts": []map[string]any{{
			"name":    "testenv",
			"context": map[string]any{"cluster": "testenv", "user": "user"},
		}},
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("encode kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
