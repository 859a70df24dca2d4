package migrate

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"
)

// maxListed bounds the pods named one by one in the text report; the
// count is always whole.
const maxListed = 50

// WriteText writes the report for an operator: what was found, section
// by section, then the findings, blocking ones marked BLOCKS.
func (r *Report) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("Bulwark as revision %s in namespace %s, trust domain %s", r.Revision, r.Namespace, r.TrustDomain)

	p("\nIstio objects Bulwark does not honour in full: %d", len(r.Unsupported.Objects))
	for _, o := range r.Unsupported.Objects {
		ref := o.Name
		if o.Namespace != "" {
			ref = o.Namespace + "/" + o.Name
		}
		p("  %s.%s %s: %s", o.Kind, o.Group, ref, strings.Join(o.Ignored, "; "))
	}
	if len(r.Unsupported.NotInstalled) > 0 {
		p("  (CRDs not installed, nothing to report: %s)", strings.Join(r.Unsupported.NotInstalled, ", "))
	}

	p("\nControl planes (Deployments labelled app=istiod): %d", len(r.ControlPlanes))
	for _, cp := range r.ControlPlanes {
		who := "Istio"
		if cp.Bulwark {
			who = "Bulwark"
		}
		td := ""
		if cp.TrustDomain != "" {
			td = ", trust domain " + cp.TrustDomain
		}
		p("  %s/%s: %s, revision %s%s", cp.Namespace, cp.Name, who, cp.Revision, td)
	}
	p("\nInjection webhooks: %d", len(r.Webhooks))
	for _, wh := range r.Webhooks {
		who := "Istio"
		if wh.Bulwark {
			who = "Bulwark"
		}
		answers := "istio.io/rev in [" + strings.Join(wh.Revisions, ", ") + "]"
		if wh.InjectionLabel {
			answers += ", istio-injection=enabled"
		}
		p("  %s (%s, calls %s): %s", wh.Name, who, wh.Service, answers)
	}
	p("\nNamespaces labelled for injection: %d", len(r.Namespaces))
	for _, ns := range r.Namespaces {
		by := "none"
		if len(ns.Injectors) > 0 {
			by = strings.Join(ns.Injectors, ", ")
		}
		p("  %s: %s, injected by %s", ns.Name, ns.Label, by)
	}

	r.writeCA(p)

	p("\nPods whose proxy does not take the trust bundle over xDS (PROXY_CONFIG_XDS_AGENT off): %d", len(r.WithoutPCDS))
	for i, px := range r.WithoutPCDS {
		if i == maxListed {
			p("  … and %d more", len(r.WithoutPCDS)-maxListed)
			break
		}
		p("  %s", px)
	}

	blocking := 0
	p("\nFindings:")
	for _, f := range r.Findings {
		mark := "note  "
		if f.Blocking {
			mark, blocking = "BLOCKS", blocking+1
		}
		p("  %s %s", mark, f.Text)
	}
	if blocking == 0 {
		p("\nnothing blocks the move")
	} else {
		p("\n%d findings block the move", blocking)
	}
}

func (r *Report) writeCA(p func(string, ...any)) {
	c := r.CA
	yes := func(b bool) string {
		if b {
			return "present"
		}
		return "absent"
	}
	p("\nCA in %s: cacerts %s, istio-ca-secret %s, istio-ca-rotation %s", r.Namespace, yes(c.CACerts), yes(c.IstioCASecret), yes(c.Rotation))
	if c.IstioRoot != nil {
		p("  Istio's istiod signs under %s (%s)", describeRoot(c.IstioRoot), c.IstioRootFrom)
	}
	switch {
	case c.Err != nil:
		p("  Bulwark cannot sign: %v", c.Err)
	case c.Bulwark.Cert == nil:
		p("  Bulwark would make a new self-signed root and keep it in istio-ca-secret")
	default:
		p("  Bulwark would sign with the key in %s, under %s", c.Bulwark.Where, describeRoot(c.Bulwark.Root))
	}
}

func describeRoot(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return fmt.Sprintf("root %s (sha256 %s, expires %s)", c.Subject, hex.EncodeToString(sum[:8]), c.NotAfter.UTC().Format(time.RFC3339))
}
