package migrate

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
)

// The move the migration guide describes: Istio's default revision with
// its self-signed root in istio-ca-secret, Bulwark to come as revision
// bulwark in the same namespace. Nothing blocks it but an object Bulwark
// does not honour, which --allow-unsupported accepts; the report names
// the old pods without PCDS and finds that Bulwark signs under Istio's
// root.
//
// The tests of this file run one after another: webhooks and namespaces
// are cluster-wide.
func TestCheckIstioDefaultRevisionToBulwark(t *testing.T) {
	c := startCluster(t)
	cp := c.env.Namespace(t)
	c.istiod(t, cp, "default", "cluster.local")
	c.injector(t, "istio-sidecar-injector-"+cp, cp, "default", map[string]string{"istio.io/rev": "default"})
	root := catest.NewRoot(t)
	c.secret(t, cp, "istio-ca-secret", istioCASecret(root))

	old := c.labelledNamespace(t, map[string]string{"istio-injection": "enabled"})
	moved := c.labelledNamespace(t, map[string]string{"istio.io/rev": "bulwark"})
	c.injectedPod(t, old, "legacy", "default", false)
	c.injectedPod(t, moved, "fresh", "bulwark", true)
	c.envoyFilter(t, old, "lua")

	r := c.check(t, Config{Namespace: cp, Revision: "bulwark"})
	if !errors.Is(r.Err(), ErrBlocked) || !hasFinding(r, true, "--allow-unsupported") {
		t.Errorf("an EnvoyFilter did not block the move: %v %q", r.Err(), blocking(r))
	}
	if !slices.ContainsFunc(r.Unsupported.Objects, func(o unsupported.Object) bool {
		return o.Kind == "EnvoyFilter" && o.Namespace == old && o.Name == "lua"
	}) {
		t.Errorf("the EnvoyFilter is not listed: %+v", r.Unsupported.Objects)
	}

	r = c.check(t, Config{Namespace: cp, Revision: "bulwark", AllowUnsupported: true})
	if err := r.Err(); err != nil {
		t.Errorf("blocked: %v %q", err, blocking(r))
	}
	if !r.CA.SameRoot() || !strings.Contains(r.CA.Bulwark.Where, "istio-ca-secret") || !r.CA.IstioCASecret || r.CA.CACerts {
		t.Errorf("CA: same root %v, Bulwark's key in %q, %+v", r.CA.SameRoot(), r.CA.Bulwark.Where, r.CA)
	}
	if !bytes.Equal(r.CA.IstioRoot.Raw, root.Cert.Raw) {
		t.Error("Istio's root is not the one in istio-ca-secret")
	}
	ns := namespacesNamed(r, old, moved)
	if got := ns[old]; got.Revision != "default" || !slices.Equal(got.Injectors, []string{"istio-sidecar-injector-" + cp}) {
		t.Errorf("namespace %s: %+v", old, got)
	}
	if got := ns[moved]; got.Revision != "bulwark" || len(got.Injectors) != 0 || !hasFinding(r, false, moved+" (istio.io/rev=bulwark): no injection webhook") {
		t.Errorf("namespace %s: %+v, findings %+v", moved, got, r.Findings)
	}
	if got := proxiesIn(r.WithoutPCDS, old, moved); !slices.Equal(got, []Proxy{{Namespace: old, Name: "legacy", Revision: "default"}}) {
		t.Errorf("pods without PCDS: %v", got)
	}
	if !slices.ContainsFunc(r.ControlPlanes, func(p ControlPlane) bool {
		return p.Namespace == cp && p.Name == "istiod" && p.Revision == "default" && !p.Bulwark && p.TrustDomain == "cluster.local"
	}) {
		t.Errorf("Istio's istiod not found: %+v", r.ControlPlanes)
	}
}

// Each of these makes the move unsafe, and Check must say so.
func TestCheckBlocks(t *testing.T) {
	c := startCluster(t)
	for name, tc := range map[string]struct {
		setup func(t *testing.T, cp string)
		cfg   Config
		want  string
	}{
		"another trust domain": {
			setup: func(t *testing.T, cp string) {
				c.istiod(t, cp, "default", "corp.example")
				c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))
			},
			want: "trust domain corp.example",
		},
		"Istio already has the revision": {
			setup: func(t *testing.T, cp string) {
				c.istiod(t, cp, "bulwark", "cluster.local")
				c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))
			},
			want: "choose another revision",
		},
		"an Istio webhook answers for the revision": {
			setup: func(t *testing.T, cp string) {
				c.istiod(t, cp, "default", "cluster.local")
				c.injector(t, "istio-revision-tag-bulwark-"+cp, cp, "bulwark", map[string]string{"istio.io/tag": "bulwark"})
				c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))
			},
			want: "Bulwark's would inject the same pods",
		},
		"no CA Secret beside Istio's istiod": {
			setup: func(t *testing.T, cp string) { c.istiod(t, cp, "default", "cluster.local") },
			want:  "neither cacerts nor istio-ca-secret",
		},
		"Istio's istiod in another namespace": {
			setup: func(t *testing.T, cp string) {
				other := c.env.Namespace(t)
				c.istiod(t, other, "default", "cluster.local")
				c.secret(t, other, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))
			},
			want: "so that both read one CA",
		},
		"a cacerts set istiod would refuse": {
			setup: func(t *testing.T, cp string) {
				c.istiod(t, cp, "default", "cluster.local")
				root := catest.NewRoot(t)
				files := catest.CACerts{Signing: root, Roots: []*catest.Cert{root}}.Files()
				files["ca-key.pem"] = catest.NewRoot(t).KeyPEM // not the certificate's key
				c.secret(t, cp, "cacerts", files)
			},
			want: "Bulwark cannot use the CA",
		},
		"a root rotation under way": {
			setup: func(t *testing.T, cp string) {
				c.istiod(t, cp, "default", "cluster.local")
				c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))
				authority, err := ca.New(ca.Config{
					TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local"),
					Store:       secretstore.New(c.client.CoreV1(), cp),
					Rotations:   secretstore.NewRotationStore(c.client.CoreV1(), cp),
				})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := authority.Rotator().Request(ctxFor(t)); err != nil {
					t.Fatal(err)
				}
			},
			want: "a root rotation is under way",
		},
		"a mesh config Bulwark would refuse": {
			setup: func(t *testing.T, cp string) {
				c.istiod(t, cp, "default", "cluster.local")
				c.meshDoc(t, cp, "default", "outboundTrafficPolicy: {mode: SOMETIMES}\n")
				c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))
			},
			want: "mesh config Bulwark would refuse",
		},
		"a namespace two webhooks inject": {
			setup: func(t *testing.T, cp string) {
				c.istiod(t, cp, "default", "cluster.local")
				c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))
				c.injector(t, "istio-sidecar-injector-1-23-"+cp, cp, "1-23", nil)
				c.injector(t, "istio-revision-tag-prod-"+cp, cp, "1-23", nil)
				c.labelledNamespace(t, map[string]string{"istio.io/rev": "1-23"})
			},
			cfg:  Config{Revision: "bulwark"},
			want: "injected by 2 webhooks",
		},
	} {
		t.Run(name, func(t *testing.T) {
			cp := c.env.Namespace(t)
			tc.setup(t, cp)
			cfg := tc.cfg
			cfg.Namespace, cfg.AllowUnsupported = cp, true
			if cfg.Revision == "" {
				cfg.Revision = "bulwark"
			}
			r := c.check(t, cfg)
			if !errors.Is(r.Err(), ErrBlocked) || !hasFinding(r, true, tc.want) {
				t.Errorf("want a blocking finding with %q; got %v, %q", tc.want, r.Err(), blocking(r))
			}
		})
	}
}

// With a plugged-in cacerts beside istio-ca-secret, both istiods sign
// under the cacerts root, and Check says so.
func TestCheckPluggedInCAIsShared(t *testing.T) {
	c := startCluster(t)
	cp := c.env.Namespace(t)
	c.istiod(t, cp, "default", "cluster.local")
	root := catest.NewRoot(t)
	inter := catest.NewIntermediate(t, root)
	c.secret(t, cp, "cacerts", catest.CACerts{Signing: inter, Roots: []*catest.Cert{root}}.Files())
	c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))

	r := c.check(t, Config{Namespace: cp, Revision: "bulwark", AllowUnsupported: true})
	if err := r.Err(); err != nil {
		t.Errorf("blocked: %v %q", err, blocking(r))
	}
	if !r.CA.SameRoot() || !bytes.Equal(r.CA.Bulwark.Root.Raw, root.Cert.Raw) || !strings.Contains(r.CA.Bulwark.Where, "cacerts") {
		t.Errorf("Bulwark's key in %q; same root %v", r.CA.Bulwark.Where, r.CA.SameRoot())
	}
}

func namespacesNamed(r *Report, names ...string) map[string]Namespace {
	out := map[string]Namespace{}
	for _, ns := range r.Namespaces {
		if slices.Contains(names, ns.Name) {
			out[ns.Name] = ns
		}
	}
	return out
}

func proxiesIn(ps []Proxy, namespaces ...string) []Proxy {
	var out []Proxy
	for _, p := range ps {
		if slices.Contains(namespaces, p.Namespace) {
			out = append(out, p)
		}
	}
	return out
}

// Fields of Istio's mesh config that Bulwark does not act on do not block
// the move, but the pods that move lose their effect: Check names them.
func TestCheckNamesTheMeshConfigFieldsBulwarkIgnores(t *testing.T) {
	c := startCluster(t)
	cp := c.env.Namespace(t)
	c.istiod(t, cp, "default", "cluster.local")
	c.meshDoc(t, cp, "default", "trustDomain: cluster.local\nenablePrometheusMerge: true\nlocalityLbSetting: {enabled: true}\ningressClass: istio\n")
	c.secret(t, cp, "istio-ca-secret", istioCASecret(catest.NewRoot(t)))

	r := c.check(t, Config{Namespace: cp, Revision: "bulwark", AllowUnsupported: true})
	if err := r.Err(); err != nil {
		t.Errorf("blocked: %v %q", err, blocking(r))
	}
	if !hasFinding(r, false, "does not act on, whose effect is lost for the pods that move: ingressClass, localityLbSetting") {
		t.Errorf("the ignored mesh config fields are not named: %+v", r.Findings)
	}
}
