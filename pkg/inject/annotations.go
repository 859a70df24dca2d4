package inject

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotation and label names, as Istio spells them.
const (
	AnnotationStatus           = "sidecar.istio.io/status"
	AnnotationInject           = "sidecar.istio.io/inject"
	LabelInject                = "sidecar.istio.io/inject"
	AnnotationTemplates        = "inject.istio.io/templates"
	AnnotationNativeSidecar    = "sidecar.istio.io/nativeSidecar"
	AnnotationProxyImage       = "sidecar.istio.io/proxyImage"
	AnnotationProxyCPU         = "sidecar.istio.io/proxyCPU"
	AnnotationProxyMemory      = "sidecar.istio.io/proxyMemory"
	AnnotationProxyCPULimit    = "sidecar.istio.io/proxyCPULimit"
	AnnotationProxyMemLimit    = "sidecar.istio.io/proxyMemoryLimit"
	AnnotationLogLevel         = "sidecar.istio.io/logLevel"
	AnnotationIncludeOutCIDRs  = "traffic.sidecar.istio.io/includeOutboundIPRanges"
	AnnotationExcludeOutCIDRs  = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
	AnnotationIncludeInPorts   = "traffic.sidecar.istio.io/includeInboundPorts"
	AnnotationExcludeInPorts   = "traffic.sidecar.istio.io/excludeInboundPorts"
	AnnotationExcludeOutPorts  = "traffic.sidecar.istio.io/excludeOutboundPorts"
	AnnotationProxyConfig      = "proxy.istio.io/config"
	AnnotationRewriteProbers   = "sidecar.istio.io/rewriteAppHTTPProbers"
	AnnotationRevision         = "istio.io/rev"
	AnnotationDefaultContainer = "kubectl.kubernetes.io/default-container"
	AnnotationDefaultLogs      = "kubectl.kubernetes.io/default-logs-container"
	AnnotationPromMerge        = "prometheus.istio.io/merge-metrics"

	LabelTLSMode           = "security.istio.io/tlsMode"
	LabelNetwork           = "topology.istio.io/network"
	LabelWorkloadName      = "service.istio.io/workload-name"
	LabelCanonicalName     = "service.istio.io/canonical-name"
	LabelCanonicalRevision = "service.istio.io/canonical-revision"
)

// AnnotationError is an invalid value in an honoured annotation. It fails
// admission with a message naming the annotation.
type AnnotationError struct {
	Annotation string
	Err        error
}

func (e *AnnotationError) Error() string {
	return "invalid annotation " + e.Annotation + ": " + e.Err.Error()
}

func (e *AnnotationError) Unwrap() error { return e.Err }

func annotationErr(name string, err error) error {
	return &AnnotationError{Annotation: name, Err: err}
}

// settings is everything the builders need once the values and the pod's
// honoured annotations are combined and validated.
type settings struct {
	template             string
	native               bool
	image                string
	initImage            string
	resources            corev1.ResourceRequirements
	logLevel             string
	includeIPRanges      string
	excludeIPRanges      string
	includeInboundPorts  string
	excludeInboundPorts  string
	excludeOutboundPorts string
	rewriteProbes        bool
	proxy                proxySettings
}

// resolveSettings reads only the allow-listed annotations; every value is
// checked and normalized before it is used.
func resolveSettings(annos map[string]string, cfg *Config, v *Values) (*settings, error) {
	g := &v.Global
	s := &settings{
		native:        g.NativeSidecar,
		image:         v.ProxyImage(),
		initImage:     v.InitImage(),
		logLevel:      g.Proxy.LogLevel,
		rewriteProbes: v.SidecarInjectorWebhook.RewriteAppHTTPProbe,
	}

	tmplNames := cfg.DefaultTemplates
	if raw, ok := annos[AnnotationTemplates]; ok {
		if len(raw) > maxValueLen {
			return nil, annotationErr(AnnotationTemplates, errors.New("too long"))
		}
		tmplNames = strings.Split(raw, ",")
	}
	t, err := cfg.resolveTemplates(tmplNames)
	if err != nil {
		return nil, annotationErr(AnnotationTemplates, err)
	}
	s.template = t

	if raw, ok := annos[AnnotationNativeSidecar]; ok {
		b, err := parseBool(raw)
		if err != nil {
			return nil, annotationErr(AnnotationNativeSidecar, err)
		}
		s.native = b
	}
	if raw, ok := annos[AnnotationRewriteProbers]; ok {
		b, err := parseBool(raw)
		if err != nil {
			return nil, annotationErr(AnnotationRewriteProbers, err)
		}
		s.rewriteProbes = b
	}
	if raw, ok := annos[AnnotationProxyImage]; ok {
		img := imageFor(g.Hub, raw, string(g.Tag))
		if err := validateImage(img); err != nil {
			return nil, annotationErr(AnnotationProxyImage, err)
		}
		s.image, s.initImage = img, img
	}
	if raw, ok := annos[AnnotationLogLevel]; ok {
		if err := validateLogLevel(raw); err != nil {
			return nil, annotationErr(AnnotationLogLevel, err)
		}
		s.logLevel = raw
	}
	if s.resources, err = resolveResources(annos, g.Proxy.Resources); err != nil {
		return nil, err
	}

	lists := []struct {
		anno  string
		def   string
		dst   *string
		parse func(string, bool) (string, error)
		star  bool
	}{
		{AnnotationIncludeOutCIDRs, g.Proxy.IncludeIPRanges, &s.includeIPRanges, normalizeCIDRs, true},
		{AnnotationExcludeOutCIDRs, g.Proxy.ExcludeIPRanges, &s.excludeIPRanges, normalizeCIDRs, false},
		{AnnotationIncludeInPorts, g.Proxy.IncludeInboundPorts, &s.includeInboundPorts, normalizePorts, true},
		{AnnotationExcludeInPorts, g.Proxy.ExcludeInboundPorts, &s.excludeInboundPorts, normalizePorts, false},
		{AnnotationExcludeOutPorts, g.Proxy.ExcludeOutboundPorts, &s.excludeOutboundPorts, normalizePorts, false},
	}
	for _, l := range lists {
		raw, ok := annos[l.anno]
		if !ok {
			raw = l.def
		}
		out, err := l.parse(raw, l.star)
		if err != nil {
			if ok {
				return nil, annotationErr(l.anno, err)
			}
			return nil, fmt.Errorf("values for %s: %w", l.anno, err)
		}
		*l.dst = out
	}

	if s.proxy, err = resolveProxyConfig(annos, v); err != nil {
		return nil, err
	}
	return s, nil
}

// parseBool accepts only the spellings strconv does, so "1\nfoo" is refused.
func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%.40q is not true or false", s)
	}
	return b, nil
}

// resolveResources follows Istio: if any of the four resource annotations is
// set, they replace the values' resources entirely.
func resolveResources(annos map[string]string, def corev1.ResourceRequirements) (corev1.ResourceRequirements, error) {
	type field struct {
		anno string
		list *corev1.ResourceList
		name corev1.ResourceName
	}
	out := corev1.ResourceRequirements{}
	fields := []field{
		{AnnotationProxyCPU, &out.Requests, corev1.ResourceCPU},
		{AnnotationProxyMemory, &out.Requests, corev1.ResourceMemory},
		{AnnotationProxyCPULimit, &out.Limits, corev1.ResourceCPU},
		{AnnotationProxyMemLimit, &out.Limits, corev1.ResourceMemory},
	}
	found := false
	for _, f := range fields {
		raw, ok := annos[f.anno]
		if !ok {
			continue
		}
		found = true
		q, err := parseQuantity(raw)
		if err != nil {
			return out, annotationErr(f.anno, err)
		}
		if *f.list == nil {
			*f.list = corev1.ResourceList{}
		}
		(*f.list)[f.name] = q
	}
	if !found {
		return *def.DeepCopy(), nil
	}
	if err := checkRequestsWithinLimits(out); err != nil {
		name := AnnotationProxyCPU
		if reqExceeds(out, corev1.ResourceMemory) {
			name = AnnotationProxyMemory
		}
		return out, annotationErr(name, err)
	}
	return out, nil
}

func reqExceeds(r corev1.ResourceRequirements, name corev1.ResourceName) bool {
	req, ok1 := r.Requests[name]
	lim, ok2 := r.Limits[name]
	return ok1 && ok2 && req.Cmp(lim) > 0
}
