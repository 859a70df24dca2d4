package interop

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// TestRootRotationWaitsForAControlledRemote runs istiod in cluster A with
// --external-istiod as the control plane of cluster B (annotated, the
// chart's remote profile installed there: its reader granted docs/rbac.md's
// primary-remote rules). With B's reader
// no longer allowed to update istio-ca-root-cert, a root rotation stays
// in prepare past its grace, naming B's namespaces; allowed again, the
// ConfigMaps in B get the new root and the rotation moves on.
func TestRootRotationWaitsForAControlledRemote(t *testing.T) {
	envA := testenv.Get(t)
	envB := testenv.StartPrivate(t)
	ctx := context.Background()
	istiodNS, nsA := envA.Namespace(t), envA.Namespace(t)
	clientB := envB.Client(t)
	createNamespace(t, clientB, istiodNS, nil)
	remote := istioctlRemoteSecret(t, envB, clusterB)
	// The chart's remote profile: the primary-remote rules bound to the
	// remote secret's reader (its webhooks, unused here, call nowhere).
	installRemoteProfile(t, clientB, istiodNS, "istio-sidecar-injector-"+istiodNS, "istio-validator-"+istiodNS, "https://localhost:1")
	nsB := createNamespace(t, clientB, "app-"+istiodNS[len(istiodNS)-5:], nil)

	p := startIstiod(t, "--kubeconfig", envA.Kubeconfig, "--namespace", istiodNS, "--clusterID", clusterA,
		"--external-istiod",
		"--cacerts-dir", filepath.Join(t.TempDir(), "cacerts"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		"--root-rotation-tick", rotationTick.String(),
		"--root-rotation-grace", rotationGrace.String(),
		"--root-grace-percentile", "-1")
	root, err := os.ReadFile(publishedRoot(t, envA, nsA))
	if err != nil {
		t.Fatal(err)
	}
	registerRemote(t, p, envA, istiodNS, remote)
	annotateNS(t, clientB, istiodNS, clusterA)
	waitRootCert(t, clientB, nsB, root)
	waitRootCert(t, clientB, istiodNS, root)

	allowRootCertUpdates(t, clientB, istiodNS, false)
	out := runIstiodCommand(t, p, "ca", "rotate", "--kubeconfig", envA.Kubeconfig, "--namespace", istiodNS)
	if !strings.Contains(out, "phase: prepare") {
		t.Fatalf("istiod ca rotate:\n%s", out)
	}
	r := waitRotation(t, envA, istiodNS, "the replica's report", func(r *ca.Rotation) bool {
		return r.Phase == ca.PhasePrepare && len(r.Replicas) > 0
	})
	newRoot, err := x509.ParseCertificate(r.NewRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("B's ConfigMaps without the new root hold the rotation in prepare, named", func(t *testing.T) {
		time.Sleep(rotationGrace + 2*time.Second)
		r := loadRotation(t, envA, istiodNS)
		if r.Phase != ca.PhasePrepare {
			t.Fatalf("phase %s while B's ConfigMaps lack the new root", r.Phase)
		}
		got := r.DataPlane(time.Time{}).Missing
		for _, ns := range []string{nsB, istiodNS} {
			if !slices.Contains(got, clusterB+"/"+ns) {
				t.Errorf("the rotation waits for %v, want %s/%s among them", got, clusterB, ns)
			}
		}
		for _, m := range got {
			if !strings.HasPrefix(m, clusterB+"/") {
				t.Errorf("the rotation waits for %s of A too", m)
			}
		}
	})
	allowRootCertUpdates(t, clientB, istiodNS, true)
	waitRotation(t, envA, istiodNS, "activation once B's ConfigMaps hold the new root", func(r *ca.Rotation) bool {
		return r.Phase != ca.PhasePrepare
	})
	cm, err := clientB.CoreV1().ConfigMaps(nsB).Get(ctx, rootCertCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !pemHoldsCert(cm.Data["root-cert.pem"], newRoot) {
		t.Fatalf("%s/%s in B lacks the new root after prepare", nsB, rootCertCM)
	}
}

// allowRootCertUpdates grants or withdraws, in the primary-remote
// ClusterRole of B's reader (grantPrimaryRemote), the update of
// istio-ca-root-cert.
func allowRootCertUpdates(t *testing.T, client kubernetes.Interface, istiodNS string, allow bool) {
	t.Helper()
	ctx := context.Background()
	name := "istio-reader-primary-remote-" + istiodNS
	cr, err := client.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, r := range cr.Rules {
		if !slices.Contains(r.Resources, "configmaps") || !slices.Contains(r.ResourceNames, rootCertCM) {
			continue
		}
		found = true
		verbs := slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "update" })
		if allow {
			verbs = append(verbs, "update")
		}
		cr.Rules[i].Verbs = verbs
	}
	if !found {
		t.Fatalf("%s: no rule on %s", name, rootCertCM)
	}
	if _, err := client.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pemHoldsCert reports whether the PEM bundle holds cert.
func pemHoldsCert(bundle string, cert *x509.Certificate) bool {
	rest := []byte(bundle)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return false
		}
		if b.Type == "CERTIFICATE" && string(b.Bytes) == string(cert.Raw) {
			return true
		}
	}
}
