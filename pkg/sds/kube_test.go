package sds

import (
	"bytes"
	"context"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// TestKubeAuthorization serves a Secret to the service account a Role lets
// get it, and refuses it to another, with the apiserver's own
// SubjectAccessReviews.
func TestKubeAuthorization(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns, otherNS := env.Namespace(t), env.Namespace(t)
	client := env.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	root := catest.NewRoot(t)
	gw := leaf(t, root)
	for _, sa := range []string{"ingress", "app"} {
		_ = env.ServiceAccountToken(t, ns, sa, nil, nil) // creates the account
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, tlsSecret(ns, "gw-cert", gw, root.CertPEM), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-gw-cert"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"gw-cert"}}},
	}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-gw-cert"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-gw-cert"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "ingress", Namespace: ns}},
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	srv, err := New(Config{
		Bundles: newFakeBundles(t), Client: client, Logger: catest.Logger(t),
		// A TTL of a nanosecond lets the test wait for the authorizer to
		// see the binding without waiting out a cached denial.
		Authorizer: NewSARAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), time.Nanosecond, 0, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	ingress := Proxy{Namespace: ns, ServiceAccount: "ingress", Secure: true}
	names := []string{"kubernetes://gw-cert", "kubernetes://" + ns + "/gw-cert-cacert"}
	w := srv.Watch(ingress, func() {})
	defer w.Close()
	w.Set(names)
	var got []*tlsv3.Secret
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = srv.Generate(ctx, ingress, names)
		if len(got) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 2 {
		t.Fatalf("the bound service account got %d secrets, want 2", len(got))
	}
	if !bytes.Equal(certOf(t, got[0]), gw.CertPEM) || !bytes.Equal(caOf(t, got[1]), root.CertPEM) {
		t.Fatal("served the wrong material")
	}

	refused := map[string]Proxy{
		"a service account without the role":              {Namespace: ns, ServiceAccount: "app", Secure: true},
		"a service account of another namespace":          {Namespace: otherNS, ServiceAccount: "ingress", Secure: true},
		"the bound service account on a plaintext stream": {Namespace: ns, ServiceAccount: "ingress"},
	}
	for name, p := range refused {
		t.Run(name, func(t *testing.T) {
			asked := []string{"kubernetes://" + ns + "/gw-cert", "kubernetes://" + ns + "/gw-cert-cacert"}
			if p.Namespace == ns {
				asked = append(asked, "kubernetes://gw-cert")
			}
			if got := srv.Generate(ctx, p, asked); len(got) != 0 {
				t.Fatalf("served %d secrets, want none", len(got))
			}
		})
	}
}
