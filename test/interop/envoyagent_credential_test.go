package interop

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	networkingapi "istio.io/api/networking/v1"
	typeapi "istio.io/api/type/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// originateWithCredential creates, through the API, a Secret of w's
// namespace that w's service account may get (a Role), and a
// DestinationRule selecting w that originates MUTUAL TLS toward svc with
// it; waits until the stand-in holds the client certificate and its CA,
// which it asked of ADS and pilot-agent forwarded to istiod, with no
// CDS NACK and nothing warming. Then the rule names a Secret of the
// namespace the service account may not get: istiod refuses it (its
// refusal counter says so) and the stand-in never holds it, its cluster
// waiting for it as Envoy's does until the fetch times out. Deleting the
// rule drops the secrets.
func originateWithCredential(t *testing.T, env *testenv.Env, a *envoyAgent, w workload, svc *corev1.Service, monitoringAddr string) {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	client := env.Client(t)
	root := catest.NewRoot(t)
	leaf := catest.NewIntermediate(t, root, catest.WithoutCA())
	const secret = "echo-client"
	if _, err := client.CoreV1().Secrets(w.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: w.Namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": root.CertPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	if _, err := client.RbacV1().Roles(w.Namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-" + secret, Namespace: w.Namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{secret}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role: %v", err)
	}
	if _, err := client.RbacV1().RoleBindings(w.Namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-" + secret, Namespace: w.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-" + secret},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: w.ServiceAccount, Namespace: w.Namespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding: %v", err)
	}

	rules := istioClient(t, env).NetworkingV1().DestinationRules(w.Namespace)
	host := svc.Name + "." + svc.Namespace + ".svc.cluster.local"
	if _, err := rules.Create(ctx, &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "echo-credential", Namespace: w.Namespace},
		Spec: networkingapi.DestinationRule{
			Host:             host,
			WorkloadSelector: &typeapi.WorkloadSelector{MatchLabels: map[string]string{"app": w.Labels["app"]}},
			TrafficPolicy: &networkingapi.TrafficPolicy{Tls: &networkingapi.ClientTLSSettings{
				Mode: networkingapi.ClientTLSSettings_MUTUAL, CredentialName: secret, Sni: "echo.example.com",
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create destination rule: %v", err)
	}
	names := []string{"kubernetes://" + secret, "kubernetes://" + secret + "-cacert"}
	cluster := fmt.Sprintf("outbound|%d||%s", envoyServicePort, host)
	created := time.Now()
	st := a.waitState(t, envoyWait, func(st *standinState) string {
		if ts := st.XDS["CDS"]; ts != nil && ts.NACKs > 0 {
			return "CDS NACKed: " + ts.LastNACK
		}
		if ts := st.XDS["SDS"]; ts != nil && ts.NACKs > 0 {
			return "SDS over ADS NACKed: " + ts.LastNACK
		}
		if c := string(st.Resources["CDS"][cluster].Resource); !strings.Contains(c, names[0]) || !strings.Contains(c, names[1]) {
			return "cluster " + cluster + " does not name the secrets yet"
		}
		for _, n := range names {
			if _, ok := st.Resources["SDS"][n]; !ok {
				return "secret " + n + " not held"
			}
		}
		for what, waits := range st.Warming {
			return fmt.Sprintf("%s warming, waits for %v", what, waits)
		}
		return ""
	})
	t.Logf("credentialName secrets held %v after the rule's create", time.Since(created).Round(time.Millisecond))
	if ca := string(st.Resources["SDS"][names[1]].Resource); !strings.Contains(ca, base64.StdEncoding.EncodeToString(root.CertPEM)) {
		t.Errorf("%s does not hold the Secret's CA", names[1])
	}
	if cert := string(st.Resources["SDS"][names[0]].Resource); !strings.Contains(cert, base64.StdEncoding.EncodeToString(leaf.CertPEM)) {
		t.Errorf("%s does not hold the Secret's certificate", names[0])
	}

	const forbidden = "echo-forbidden"
	if _, err := client.CoreV1().Secrets(w.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: forbidden, Namespace: w.Namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": root.CertPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	const unauthorized = `bulwark_sds_refused_total{reason="unauthorized"}`
	refusedBefore := metric(t, monitoringAddr, unauthorized)
	dr, err := rules.Get(ctx, "echo-credential", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get destination rule: %v", err)
	}
	dr.Spec.TrafficPolicy.Tls.CredentialName = forbidden
	if _, err := rules.Update(ctx, dr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update destination rule: %v", err)
	}
	a.waitState(t, envoyWait, func(st *standinState) string {
		if c := string(st.Resources["CDS"][cluster].Resource); !strings.Contains(c, "kubernetes://"+forbidden) {
			return "cluster " + cluster + " does not name " + forbidden + " yet"
		}
		if got := metric(t, monitoringAddr, unauthorized); got == refusedBefore {
			return "istiod has not refused " + forbidden + " yet (" + unauthorized + " " + got + ")"
		}
		return ""
	})
	st = a.state(t)
	for name := range st.Resources["SDS"] {
		if strings.Contains(name, forbidden) {
			t.Errorf("the stand-in holds %s, which its service account may not get", name)
		}
	}
	if waits := st.Warming["cluster "+cluster]; !strings.Contains(fmt.Sprint(waits), "kubernetes://"+forbidden) {
		t.Errorf("cluster %s waits for %v, want the refused secret", cluster, waits)
	}

	if err := rules.Delete(ctx, "echo-credential", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete destination rule: %v", err)
	}
	a.waitState(t, envoyWait, func(st *standinState) string {
		if c := string(st.Resources["CDS"][cluster].Resource); strings.Contains(c, names[0]) {
			return "cluster " + cluster + " still names the secret"
		}
		for n := range st.Resources["SDS"] {
			return "secret " + n + " still held"
		}
		for what, waits := range st.Warming {
			return fmt.Sprintf("%s warming, waits for %v", what, waits)
		}
		return ""
	})
}
