package kube

import (
	"context"
	"encoding/pem"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// term is one leadership term of a replica, from its log.
type term struct {
	replica    string
	start, end time.Time // end is zero while the term lasts
}

var logTime = regexp.MustCompile(`^time=(\S+) `)

// terms reads p's leadership terms of the namespace controller from its
// log: the workers run between "leading:" and "stopped leading", and only
// they write ConfigMaps.
func (p *istiod) terms(t *testing.T) []term {
	t.Helper()
	var out []term
	for _, line := range strings.Split(p.logs.String(), "\n") {
		leading, stopped := strings.Contains(line, `msg="leading: distributing`), strings.Contains(line, `msg="stopped leading"`)
		if !leading && !stopped {
			continue
		}
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s: no time in %q", p.name, line)
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		switch {
		case leading:
			out = append(out, term{replica: p.name, start: at})
		case len(out) > 0 && out[len(out)-1].end.IsZero():
			out[len(out)-1].end = at
		}
	}
	return out
}

// checkOneWriterAtATime fails if two replicas' terms overlap.
func checkOneWriterAtATime(t *testing.T, ps ...*istiod) {
	t.Helper()
	var all []term
	for _, p := range ps {
		all = append(all, p.terms(t)...)
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.replica == b.replica {
				continue
			}
			aEnd, bEnd := a.end, b.end
			if aEnd.IsZero() {
				aEnd = time.Now()
			}
			if bEnd.IsZero() {
				bEnd = time.Now()
			}
			if a.start.Before(bEnd) && b.start.Before(aEnd) {
				t.Errorf("%s led %s–%s while %s led %s–%s: two replicas could write at once",
					a.replica, a.start.Format(time.StampMilli), a.end.Format(time.StampMilli),
					b.replica, b.start.Format(time.StampMilli), b.end.Format(time.StampMilli))
			}
		}
	}
}

// TestLeaderLostHandsOverTheNamespaceController runs three istiods and
// loses two leaders in turn: one stopped (SIGTERM, which releases the
// Lease) and one cut off from the API server (a crash or a partition,
// which releases nothing). Each time another replica leads within the
// lease duration of the last renewal, and no two replicas lead at once.
//
// Its own API server: istiods of other tests would write their roots into
// its namespaces.
func TestLeaderLostHandsOverTheNamespaceController(t *testing.T) {
	t.Parallel()
	env, ns, apiHost := privateCluster(t)
	client := env.Client(t)
	kubeconfig := istiodKubeconfig(t, env, ns)
	links := map[string]*link{}
	var all []*istiod
	for _, name := range []string{"istiod-a", "istiod-b", "istiod-c"} {
		links[name] = newLink(t, apiHost)
		p := newIstiodIn(t, env, name, ns, kubeconfigVia(t, kubeconfig, env.URL, links[name].URL()))
		p.run(t)
		all = append(all, p)
	}
	waitFor(t, "three istiods ready", 90*time.Second, func() bool { return all[0].ready() && all[1].ready() && all[2].ready() })
	byName := map[string]*istiod{}
	for _, p := range all {
		byName[p.name] = p
	}
	leader := func(among ...*istiod) *istiod {
		var ld string
		waitFor(t, "a leader", 60*time.Second, func() bool { ld = leaderOf(t, client, ns, among...); return ld != "" })
		return byName[ld]
	}
	others := func(p *istiod, from []*istiod) []*istiod {
		var out []*istiod
		for _, o := range from {
			if o != p {
				out = append(out, o)
			}
		}
		return out
	}
	// handover waits until one of rest leads, by the Lease and by its log.
	handover := func(what string, rest []*istiod, bound time.Duration) *istiod {
		t.Helper()
		began := time.Now()
		var next *istiod
		waitFor(t, what, bound+30*time.Second, func() bool {
			for _, p := range rest {
				if leaderOf(t, client, ns, p) != "" && p.leading() {
					next = p
					return true
				}
			}
			return false
		})
		took := time.Since(began)
		t.Logf("%s: %s leads after %v (lease duration %v)", what, next.name, took.Round(time.Millisecond), rootcert.DefaultLeaseDuration)
		if took > bound {
			t.Errorf("%s: took %v, want within %v", what, took, bound)
		}
		return next
	}

	first := leader(all...)
	waitFor(t, first.name+" leading", 30*time.Second, first.leading)

	// Stopped (SIGTERM) in the middle of a burst of root-certificate
	// writes: the Lease is released, the next replica acquires it at its
	// next retry and finishes the work.
	var burst []string
	for range 20 {
		burst = append(burst, env.Namespace(t))
	}
	first.stop()
	rest := others(first, all)
	second := handover("leader stopped", rest, rootcert.DefaultLeaseDuration)
	root := certDERs(rest[0].rootPEM(t, env))
	if root == "" {
		t.Fatal("no root certificate in istio-ca-secret")
	}
	ctx := context.Background()
	waitFor(t, "istio-ca-root-cert, whole, in every namespace of the burst", 60*time.Second, func() bool {
		for _, bns := range burst {
			cm, err := client.CoreV1().ConfigMaps(bns).Get(ctx, rootcert.ConfigMapName, metav1.GetOptions{})
			if err != nil || certDERs([]byte(cm.Data[rootcert.DataKey])) != root {
				return false
			}
		}
		return true
	})

	// Cut off: the Lease expires. The cut-off leader stops writing after
	// the renew deadline, before the Lease expires for the others.
	links[second.name].Cut()
	rest = others(second, rest)
	// The Lease expires LeaseDuration after the others saw its last renewal,
	// which was up to a retry period before the cut, and they notice at
	// their next retry (a retry period with jitter): the bound allows both
	// and a retry period of slack for a loaded machine.
	handover("leader cut off from the API server", rest,
		rootcert.DefaultLeaseDuration+4*rootcert.DefaultRetryPeriod)
	waitFor(t, second.name+" stopping", 30*time.Second, func() bool { return !second.leading() })
	checkOneWriterAtATime(t, all...)
}

// rootPEM is the root of p's CA, from istio-ca-secret in its namespace.
func (p *istiod) rootPEM(t *testing.T, env *testenv.Env) []byte {
	t.Helper()
	secret, err := env.Client(t).CoreV1().Secrets(p.cfg.Namespace).Get(context.Background(), secretstore.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", secretstore.SecretName, err)
	}
	return secret.Data[ca.FileRootCert]
}

// certDERs joins the DER of the certificates in pemBytes, in order, so
// that two bundles compare whatever their PEM formatting; "" when there are
// none.
func certDERs(pemBytes []byte) string {
	var out strings.Builder
	for {
		var b *pem.Block
		b, pemBytes = pem.Decode(pemBytes)
		if b == nil {
			return out.String()
		}
		if b.Type == "CERTIFICATE" {
			out.Write(b.Bytes)
		}
	}
}
