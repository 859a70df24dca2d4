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

// VisibleService is the service of hostname if the workloads of
// namespace see it, else nil.
func (s *Snapshot) VisibleService(hostname, namespace string) *Service {
	if svc := s.Service(hostname); s.ServiceVisible(svc, namespace) {
		return svc
	}
	return nil
}

// ServicesVisibleTo returns the services the workloads of namespace see
// (ServiceVisible), sorted by hostname: Services itself when every
// service is visible to every namespace.
func (s *Snapshot) ServicesVisibleTo(namespace string) []*Service {
	if !s.exporting && (s.Options.DefaultServiceExportTo == "" || s.Options.DefaultServiceExportTo == ExportPublic) {
		return s.services
	}
	out := make([]*Service, 0, len(s.services))
	for _, svc := range s.services {
		if s.ServiceVisible(svc, namespace) {
			out = append(out, svc)
		}
	}
	return out
}
