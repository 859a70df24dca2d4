package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
)

// Config configures Check.
type Config struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// Discovery answers which Istio kinds the apiserver serves; default
	// Client's.
	Discovery discovery.DiscoveryInterface
	// Namespace is where Bulwark is, or will be, installed: Istio's
	// istiod's namespace, so that both read one CA.
	Namespace string
	// Revision is Bulwark's revision (the chart's revision value).
	Revision string
	// TrustDomain is Bulwark's trust domain; default cluster.local.
	TrustDomain string
	// AllowUnsupported makes objects Bulwark does not honour in full a
	// warning rather than a reason to stop.
	AllowUnsupported bool
	// Logger receives the unsupported-config reporter's lines; default
	// none.
	Logger *slog.Logger
}

// Finding is one thing found; a Blocking one stops the move.
type Finding struct {
	Blocking bool
	Text     string
}

// Report is what Check found.
type Report struct {
	Namespace, Revision, TrustDomain string

	Unsupported   unsupported.Report
	ControlPlanes []ControlPlane
	Webhooks      []Webhook
	Namespaces    []Namespace
	CA            *CA
	// WithoutPCDS are the running pods whose istio-proxy does not take
	// the trust bundle over xDS.
	WithoutPCDS []Proxy
	Findings    []Finding
}

// ErrBlocked is returned by Report.Err when a finding blocks the move.
var ErrBlocked = errors.New("the move from Istio is blocked")

// Err is nil, or ErrBlocked with the number of blocking findings.
func (r *Report) Err() error {
	n := 0
	for _, f := range r.Findings {
		if f.Blocking {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d findings", ErrBlocked, n)
}

func (r *Report) block(format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Blocking: true, Text: fmt.Sprintf(format, args...)})
}

func (r *Report) warn(format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Text: fmt.Sprintf(format, args...)})
}

// Check looks at the cluster as it is and says what moving it from
// Istio's istiod to Bulwark, installed as cfg.Revision in cfg.Namespace,
// meets. It reads and writes nothing else. An error means the cluster
// could not be read; what blocks the move is in the report (Err).
func Check(ctx context.Context, cfg Config) (*Report, error) {
	cfg.TrustDomain = cmp.Or(cfg.TrustDomain, defaultTrustDomain)
	cfg.Revision = cmp.Or(cfg.Revision, defaultRevision)
	if cfg.Discovery == nil {
		cfg.Discovery = cfg.Client.Discovery()
	}
	td, err := spiffeid.TrustDomainFromString(cfg.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("trust domain: %w", err)
	}
	r := &Report{Namespace: cfg.Namespace, Revision: cfg.Revision, TrustDomain: td.Name()}
	if r.Unsupported, err = unsupported.Scan(ctx, unsupported.Config{
		Discovery: cfg.Discovery, Dynamic: cfg.Dynamic, Metadata: cfg.Metadata, Logger: cfg.Logger,
	}); err != nil {
		return nil, err
	}
	if r.ControlPlanes, err = listControlPlanes(ctx, cfg.Client); err != nil {
		return nil, err
	}
	if r.Webhooks, err = listWebhooks(ctx, cfg.Client); err != nil {
		return nil, err
	}
	if r.Namespaces, err = listNamespaces(ctx, cfg.Client, r.Webhooks); err != nil {
		return nil, err
	}
	if r.CA, err = checkCA(ctx, cfg.Client, cfg.Namespace, td); err != nil {
		return nil, err
	}
	if r.WithoutPCDS, err = ListProxies(ctx, cfg.Client); err != nil {
		return nil, err
	}
	r.judge(cfg)
	return r, nil
}

// judge turns what was found into findings.
func (r *Report) judge(cfg Config) {
	if n := len(r.Unsupported.Objects); n > 0 {
		const what = "%d Istio objects are not honoured, or only partly, by Bulwark (listed above)"
		if cfg.AllowUnsupported {
			r.warn(what+"; allowed by --allow-unsupported", n)
		} else {
			r.block(what+": remove or replace them, or accept it with --allow-unsupported", n)
		}
	}
	r.judgeControlPlanes()
	r.judgeNamespaces()
	r.judgeCA()
	if n := len(r.WithoutPCDS); n > 0 {
		r.warn("%d running pods do not take the trust bundle over xDS (PROXY_CONFIG_XDS_AGENT off): a root rotation reaches them only when they restart; restart them into revision %s before rotating the root", n, r.Revision)
	}
}

// istio returns Istio's istiods, that is those not Bulwark's.
func (r *Report) istio() []ControlPlane {
	return slices.DeleteFunc(slices.Clone(r.ControlPlanes), func(cp ControlPlane) bool { return cp.Bulwark })
}

func (r *Report) judgeControlPlanes() {
	istio := r.istio()
	if len(istio) == 0 {
		r.warn("no Istio istiod found (Deployments labelled app=istiod): nothing to move from")
	}
	for _, cp := range istio {
		if cp.Namespace != r.Namespace {
			r.block("Istio's istiod %s/%s runs in namespace %s, not %s: install Bulwark in %s so that both read one CA", cp.Namespace, cp.Name, cp.Namespace, r.Namespace, cp.Namespace)
		}
		if cp.TrustDomain != "" && cp.TrustDomain != r.TrustDomain {
			r.block("Istio's istiod %s/%s has trust domain %s, Bulwark %s: install Bulwark with meshConfig.trustDomain=%s, or the identities differ", cp.Namespace, cp.Name, cp.TrustDomain, r.TrustDomain, cp.TrustDomain)
		}
		if cp.MeshRefused != "" {
			r.block("Istio's istiod %s/%s has a mesh config Bulwark would refuse, so Bulwark's chart given the same meshConfig would not start: %s", cp.Namespace, cp.Name, cp.MeshRefused)
		}
		if len(cp.MeshIgnored) > 0 {
			r.warn("Istio's istiod %s/%s has a mesh config that sets fields Bulwark does not act on, whose effect is lost for the pods that move: %s", cp.Namespace, cp.Name, strings.Join(cp.MeshIgnored, ", "))
		}
		if cp.Revision == r.Revision {
			r.block("Istio's istiod %s/%s is revision %s, Bulwark's revision too: choose another revision for Bulwark", cp.Namespace, cp.Name, cp.Revision)
		}
	}
	for _, wh := range r.Webhooks {
		if !wh.Bulwark && (wh.answers(labelRev, r.Revision) || (r.Revision == defaultRevision && wh.InjectionLabel)) {
			r.block("the injection webhook %s (not Bulwark's) answers for revision %s: Bulwark's would inject the same pods", wh.Name, r.Revision)
		}
	}
}

func (r *Report) judgeNamespaces() {
	for _, ns := range r.Namespaces {
		switch {
		case ns.Revision == "":
		case len(ns.Injectors) == 0:
			r.warn("namespace %s (%s): no injection webhook answers for it; its new pods get no sidecar", ns.Name, ns.Label)
		case len(ns.Injectors) > 1:
			r.block("namespace %s (%s) is injected by %d webhooks (%s): each pod would get two proxies", ns.Name, ns.Label, len(ns.Injectors), strings.Join(ns.Injectors, ", "))
		}
	}
}

func (r *Report) judgeCA() {
	c, istio := r.CA, r.istio()
	switch {
	case c.Err != nil:
		r.block("Bulwark cannot use the CA in %s: %v", r.Namespace, c.Err)
		return
	case c.Bulwark.Phase != "":
		r.block("a root rotation is under way (%s, phase %s): finish it before the move", "Secret "+r.Namespace+"/istio-ca-rotation", c.Bulwark.Phase)
	}
	switch {
	case c.IstioRoot == nil && len(istio) > 0:
		r.block("Istio's istiod runs but %s holds neither cacerts nor istio-ca-secret (an external CA?): Bulwark would make a root Istio's pods do not trust", r.Namespace)
	case c.IstioRoot != nil && c.Bulwark.Root == nil:
		r.block("Bulwark would not sign under the root of %s", c.IstioRootFrom)
	case c.IstioRoot != nil && !c.SameRoot():
		r.block("Bulwark would sign under another root (%s) than Istio's istiod (%s): their pods would not trust each other", c.Bulwark.Where, c.IstioRootFrom)
	}
}
