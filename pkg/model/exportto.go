package model

import (
	"slices"
	"strings"
)

// ExportToAnnotation is the Service annotation that says which
// namespaces see the service: a comma-separated list of namespaces, "."
// for the service's own, "*" for every one, "~" for none.
const ExportToAnnotation = "networking.istio.io/exportTo"

// Visibility names Istio's exportTo uses beside namespace names.
const (
	ExportPublic  = "*" // every namespace
	ExportPrivate = "." // the object's own namespace
	ExportNone    = "~" // no namespace
)

// maxExportTo bounds the entries read of one exportTo annotation.
const maxExportTo = 256

// ParseExportTo reads a Service's exportTo annotation as Istio does: the
// comma-separated entries, spaces trimmed; nil for an empty annotation,
// which leaves the mesh's default in force. Entries past the first 256
// are not read.
func ParseExportTo(annotation string) []string {
	if annotation == "" {
		return nil
	}
	var out []string
	for e := range strings.SplitSeq(annotation, ",") {
		if len(out) == maxExportTo {
			break
		}
		out = append(out, strings.TrimSpace(e))
	}
	return out
}

// joinExportTo is a mesh default exportTo list as Options hold it: nil
// (Istio's default, "*") is "".
func joinExportTo(list []string) string { return strings.Join(list, ",") }

// defaultExportTo is an Options default exportTo list as a list: "" is
// Istio's default, "*".
func defaultExportTo(joined string) []string {
	if joined == "" {
		return []string{ExportPublic}
	}
	return strings.Split(joined, ",")
}

// WithExportDefaults returns s as seen under the mesh's
// defaultServiceExportTo and defaultDestinationRuleExportTo (nil is
// Istio's default, "*"): s itself when it already is, else a copy
// sharing s's resources, whose version tells the two apart.
func (s *Snapshot) WithExportDefaults(service, destinationRule []string) *Snapshot {
	svc, dr := joinExportTo(service), joinExportTo(destinationRule)
	if svc == s.Options.DefaultServiceExportTo && dr == s.Options.DefaultDestinationRuleExportTo {
		return s
	}
	c := *s
	c.Options.DefaultServiceExportTo, c.Options.DefaultDestinationRuleExportTo = svc, dr
	c.rules = &lazyRules{}
	c.shared = &sharedValues{}
	if s.Version != "" {
		c.Version = s.Version + "+export:" + svc + "/" + dr
	}
	return &c
}

// ServiceVisible reports whether svc is visible to the workloads of
// namespace, as Istio decides it: the service's exportTo (its annotation,
// else the mesh's defaultServiceExportTo) holds "*", or, without "~",
// namespace by name or "." when namespace is the service's own.
func (s *Snapshot) ServiceVisible(svc *Service, namespace string) bool {
	if svc == nil {
		return false
	}
	exportTo := svc.ExportTo
	if len(exportTo) == 0 {
		if s.Options.DefaultServiceExportTo == "" {
			return true
		}
		exportTo = defaultExportTo(s.Options.DefaultServiceExportTo)
	}
	switch {
	case slices.Contains(exportTo, ExportPublic):
		return true
	case slices.Contains(exportTo, ExportNone):
		return false
	}
	return slices.Contains(exportTo, namespace) || (svc.Namespace == namespace && slices.Contains(exportTo, ExportPrivate))
}

// VisibleService is the service of hostname the workloads of namespace
// see (choose), else nil.
func (s *Snapshot) VisibleService(hostname, namespace string) *Service {
	return s.choose(s.Service(hostname), namespace)
}

// ServicesVisibleTo returns the services the workloads of namespace see
// (choose), sorted by hostname: Services itself when every service is
// visible to every namespace.
func (s *Snapshot) ServicesVisibleTo(namespace string) []*Service {
	if !s.exporting && (s.Options.DefaultServiceExportTo == "" || s.Options.DefaultServiceExportTo == ExportPublic) {
		return s.services
	}
	out := make([]*Service, 0, len(s.services))
	for _, svc := range s.services {
		if c := s.choose(svc, namespace); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// choose is the service of svc's hostname the workloads of namespace see,
// svc itself or one of its alternates (ServiceEntries of other
// namespaces for the hostname), as Istio's sidecar scope chooses among
// the services of one hostname: of those visible to namespace, the one of
// namespace itself, else a Kubernetes service, else the first of those
// exported to namespace by name (or private to it), then of the public
// ones, oldest first. Nil when none is visible.
func (s *Snapshot) choose(svc *Service, namespace string) *Service {
	if svc == nil {
		return nil
	}
	alts := s.alternates[strings.TrimSuffix(svc.Hostname, ".")]
	if len(alts) == 0 {
		if s.ServiceVisible(svc, namespace) {
			return svc
		}
		return nil
	}
	var byName, public *Service
	for _, c := range append([]*Service{svc}, alts...) {
		if !s.ServiceVisible(c, namespace) {
			continue
		}
		switch {
		case c.Namespace == namespace:
			return c
		case c.Entry == nil:
			// A Kubernetes service (only ever svc) wins over entries of
			// other namespaces: below.
		case s.exportedPublicly(c):
			if public == nil {
				public = c
			}
		case byName == nil:
			byName = c
		}
	}
	if svc.Entry == nil && s.ServiceVisible(svc, namespace) {
		return svc
	}
	if byName != nil {
		return byName
	}
	return public
}

// exportedPublicly reports whether svc is visible to every namespace
// (its exportTo, else the mesh default, holds "*").
func (s *Snapshot) exportedPublicly(svc *Service) bool {
	if len(svc.ExportTo) == 0 {
		return s.Options.DefaultServiceExportTo == "" || slices.Contains(defaultExportTo(s.Options.DefaultServiceExportTo), ExportPublic)
	}
	return slices.Contains(svc.ExportTo, ExportPublic)
}

// HostChoices lists, for the hostnames ServiceEntries of several
// namespaces name, which namespace's service the workloads of namespace
// see ("<host>=<namespace>", "" for none), sorted: what their resources
// read beyond the hostname. Empty when no hostname has alternates.
func (s *Snapshot) HostChoices(namespace string) []string {
	if len(s.alternates) == 0 {
		return nil
	}
	out := make([]string, 0, len(s.alternates))
	for h := range s.alternates {
		c := s.choose(s.Service(h), namespace)
		if c == nil {
			c = s.choose(s.Service(h+"."), namespace)
		}
		ns := ""
		if c != nil {
			ns = c.Namespace
		}
		out = append(out, h+"="+ns)
	}
	slices.Sort(out)
	return out
}

// Alternates are the services of ServiceEntries of other namespaces for
// the hostname of the snapshot's service of hostname (choose picks among
// them and it), oldest first; nil for none.
func (s *Snapshot) Alternates(hostname string) []*Service {
	if len(s.alternates) == 0 {
		return nil
	}
	return s.alternates[strings.TrimSuffix(hostname, ".")]
}
