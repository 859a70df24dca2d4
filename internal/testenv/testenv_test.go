package testenv_test

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestAPIServerAnswers(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	v, err := env.Client(t).Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if !strings.HasPrefix(env.URL, "https://127.0.0.1:") || env.Issuer != env.URL {
		t.Errorf("URL %q, Issuer %q: want the same https loopback URL", env.URL, env.Issuer)
	}
	if _, err := os.Stat(env.Kubeconfig); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
	t.Logf("kube-apiserver %s at %s, started in %s", v.GitVersion, env.URL, env.StartupTime.Round(time.Millisecond))
}

func TestObjectsRoundTrip(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	client := env.Client(t)
	ctx := t.Context()

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cacerts"},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"ca-key.pem": {0, 1, 2, 0xff}},
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	gotSecret, err := client.CoreV1().Secrets(ns).Get(ctx, "cacerts", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get secret: %v", err)
	}
	if string(gotSecret.Data["ca-key.pem"]) != string(secret.Data["ca-key.pem"]) {
		t.Errorf("secret data = %v, want %v", gotSecret.Data, secret.Data)
	}

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-ca-root-cert"},
		Data:       map[string]string{"root-cert.pem": string(env.CAPEM)},
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	gotCM, err := client.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get configmap: %v", err)
	}
	if gotCM.Data["root-cert.pem"] != cm.Data["root-cert.pem"] {
		t.Errorf("configmap data differs: %q", gotCM.Data)
	}

	// The apiserver allocates ClusterIPs itself (it readies the default
	// ServiceCIDR); no controller is needed.
	svc, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc-xds", Port: 15012}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil || !netip.MustParsePrefix("10.0.0.0/16").Contains(ip) {
		t.Errorf("service cluster IP = %q, want one from 10.0.0.0/16", svc.Spec.ClusterIP)
	}

	holder := "istiod-0"
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	if _, err := client.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create lease: %v", err)
	}
	gotLease, err := client.CoordinationV1().Leases(ns).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	if gotLease.Spec.HolderIdentity == nil || *gotLease.Spec.HolderIdentity != holder {
		t.Errorf("lease holder = %v, want %q", gotLease.Spec.HolderIdentity, holder)
	}
}

func TestTokenReviewChecksAudience(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	token := env.ServiceAccountToken(t, ns, "app", []string{"istio-ca"}, nil)

	got := review(t, env.Client(t), token, "istio-ca")
	if !got.Authenticated {
		t.Fatalf("review for istio-ca not authenticated: %q", got.Error)
	}
	if want := "system:serviceaccount:" + ns + ":app"; got.User.Username != want {
		t.Errorf("username = %q, want %q", got.User.Username, want)
	}
	if len(got.Audiences) != 1 || got.Audiences[0] != "istio-ca" {
		t.Errorf("audiences = %q, want [istio-ca]", got.Audiences)
	}

	if other := review(t, env.Client(t), token, "other"); other.Authenticated {
		t.Errorf("review for audience other authenticated as %q", other.User.Username)
	}
}

func TestPodBoundToken(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	client := env.Client(t)
	ctx := t.Context()

	// ServiceAccount admission refuses pods whose account does not exist.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "workload"}}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service account: %v", err)
	}
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "workload"},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa.Name,
			Containers:         []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	token := env.ServiceAccountToken(t, ns, "workload", []string{"istio-ca"}, pod)

	got := review(t, client, token, "istio-ca")
	if !got.Authenticated {
		t.Fatalf("bound token not authenticated: %q", got.Error)
	}
	extra := got.User.Extra
	if name := extra["authentication.kubernetes.io/pod-name"]; len(name) != 1 || name[0] != pod.Name {
		t.Errorf("extra pod-name = %q, want [%s]", name, pod.Name)
	}
	if uid := extra["authentication.kubernetes.io/pod-uid"]; len(uid) != 1 || uid[0] != string(pod.UID) {
		t.Errorf("extra pod-uid = %q, want [%s]", uid, pod.UID)
	}

	zero := int64(0)
	if err := client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	// The apiserver caches successful token authentications for 10s (not
	// configurable), so the deletion revokes the token within that time.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := review(t, client, token, "istio-ca")
		if !r.Authenticated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("token bound to deleted pod still authenticates as %q", r.User.Username)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOIDCDiscovery(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	httpc := env.HTTPClient() // trusts CAPEM, sends no credentials

	var discovery struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	getJSON(t, httpc, env.Issuer+"/.well-known/openid-configuration", &discovery)
	if discovery.Issuer != env.Issuer {
		t.Errorf("issuer = %q, want %q", discovery.Issuer, env.Issuer)
	}
	if !strings.HasPrefix(discovery.JWKSURI, env.Issuer+"/") {
		t.Errorf("jwks_uri = %q, want under %q", discovery.JWKSURI, env.Issuer)
	}

	var jwks struct {
		Keys []struct {
			Kid string `json:"kid"`
			Kty string `json:"kty"`
			Alg string `json:"alg"`
			N   string `json:"n"`
			E   string `json:"e"`
		} `json:"keys"`
	}
	getJSON(t, httpc, discovery.JWKSURI, &jwks)
	if len(jwks.Keys) == 0 {
		t.Fatal("JWKS has no keys")
	}

	// A ServiceAccount token verifies against the published key.
	token := env.ServiceAccountToken(t, ns, "app", []string{"istio-ca"}, nil)
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	var header struct{ Alg, Kid string }
	var claims struct {
		Iss string   `json:"iss"`
		Aud []string `json:"aud"`
	}
	decodeSegment(t, parts[0], &header)
	decodeSegment(t, parts[1], &claims)
	if claims.Iss != env.Issuer {
		t.Errorf("token iss = %q, want %q", claims.Iss, env.Issuer)
	}
	for _, k := range jwks.Keys {
		if k.Kid != header.Kid {
			continue
		}
		if k.Kty != "RSA" || header.Alg != "RS256" {
			t.Fatalf("key type %s, token alg %s: want RSA and RS256", k.Kty, header.Alg)
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(b64(t, k.N)), E: int(new(big.Int).SetBytes(b64(t, k.E)).Int64())}
		digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], b64(t, parts[2])); err != nil {
			t.Fatalf("token signature does not verify with JWKS key %s: %v", k.Kid, err)
		}
		return
	}
	t.Fatalf("no JWKS key with the token's kid %q", header.Kid)
}

func TestRBACIsEnforced(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	token := env.ServiceAccountToken(t, ns, "nobody", nil, nil)
	client, err := kubernetes.NewForConfig(env.RESTConfigForToken(token))
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	_, err = client.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing secrets with no roles: err = %v, want Forbidden", err)
	}
	// The token itself is good: the caller is known, only not allowed.
	who, err := client.AuthenticationV1().SelfSubjectReviews().Create(t.Context(),
		&authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":nobody"; who.Status.UserInfo.Username != want {
		t.Errorf("self subject = %q, want %q", who.Status.UserInfo.Username, want)
	}
}

func review(t *testing.T, client kubernetes.Interface, token string, audiences ...string) authenticationv1.TokenReviewStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token review: %v", err)
	}
	return r.Status
}

func getJSON(t *testing.T, c *http.Client, url string, v any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode %s: %v", url, err)
	}
}

func decodeSegment(t *testing.T, seg string, v any) {
	t.Helper()
	if err := json.Unmarshal(b64(t, seg), v); err != nil {
		t.Fatalf("decode token segment: %v", err)
	}
}

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("base64url: %v", err)
	}
	return b
}
