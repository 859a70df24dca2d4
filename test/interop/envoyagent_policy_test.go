package interop

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	securityv1beta1 "istio.io/api/security/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// changeEnvoyPolicy creates an ALLOW AuthorizationPolicy selecting w
// through the API and waits until the stand-in's virtualInbound carries
// RBAC on every chain but the loop guard, naming the allowed principal;
// then deletes it and waits until no chain carries RBAC. Every LDS
// update must be ACKed.
func changeEnvoyPolicy(t *testing.T, env *testenv.Env, a *envoyAgent, w workload) {
	policies := istioClient(t, env).SecurityV1().AuthorizationPolicies(w.Namespace)
	caller := workload{Namespace: w.Namespace, ServiceAccount: "caller"}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()

	before := a.state(t)
	if rbac, err := inboundRBAC(before); err != nil || anyRBAC(rbac) {
		t.Fatalf("virtualInbound before any AuthorizationPolicy: RBAC %v, %v", rbac, err)
	}
	ldsBefore := before.XDS["LDS"].ACKs

	created := time.Now()
	if _, err := policies.Create(ctx, serverPolicy(meshModel{Namespace: w.Namespace, Server: w}, "echo-callers",
		securityv1beta1.AuthorizationPolicy_ALLOW, caller), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ALLOW policy: %v", err)
	}
	st := a.waitState(t, envoyWait, func(st *standinState) string {
		if p := ldsProblem(st); p != "" {
			return p
		}
		rbac, err := inboundRBAC(st)
		if err != nil {
			return err.Error()
		}
		var bare []string
		for chain, filters := range rbac {
			if len(filters) == 0 && !strings.Contains(chain, "(port 15006)") {
				bare = append(bare, chain)
			}
		}
		if len(bare) > 0 {
			slices.Sort(bare)
			return fmt.Sprintf("virtualInbound chains without RBAC: %v", bare)
		}
		return ""
	})
	t.Logf("RBAC on virtualInbound %v after the create (LDS ACKs %d → %d)",
		time.Since(created).Round(time.Millisecond), ldsBefore, st.XDS["LDS"].ACKs)
	rbac, _ := inboundRBAC(st)
	for _, chain := range slices.Sorted(maps.Keys(rbac)) {
		t.Logf("  %s: %v", chain, rbac[chain])
	}
	if l := string(st.Resources["LDS"]["virtualInbound"].Resource); !strings.Contains(l, caller.SPIFFEID()) {
		t.Errorf("virtualInbound's RBAC does not name the allowed principal %s", caller.SPIFFEID())
	}

	deleted := time.Now()
	if err := policies.Delete(ctx, "echo-callers", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete ALLOW policy: %v", err)
	}
	a.waitState(t, envoyWait, func(st *standinState) string {
		if p := ldsProblem(st); p != "" {
			return p
		}
		rbac, err := inboundRBAC(st)
		if err != nil {
			return err.Error()
		}
		if anyRBAC(rbac) {
			return fmt.Sprintf("virtualInbound still carries RBAC: %v", rbac)
		}
		return ""
	})
	t.Logf("RBAC off virtualInbound %v after the delete", time.Since(deleted).Round(time.Millisecond))
}

// ldsProblem reports a NACK or a warming listener.
func ldsProblem(st *standinState) string {
	if ts := st.XDS["LDS"]; ts != nil && ts.NACKs > 0 {
		return fmt.Sprintf("LDS NACKed: %s", ts.LastNACK)
	}
	if ts := st.XDS["RDS"]; ts != nil && ts.NACKs > 0 {
		return fmt.Sprintf("RDS NACKed: %s", ts.LastNACK)
	}
	for what, waits := range st.Warming {
		return fmt.Sprintf("%s warming, waits for %v", what, waits)
	}
	return ""
}

func anyRBAC(rbac map[string][]string) bool {
	for _, f := range rbac {
		if len(f) > 0 {
			return true
		}
	}
	return false
}
