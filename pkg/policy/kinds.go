package policy

import (
	"slices"
)

// Support says how far Bulwark honours a kind.
type Support string

const (
	// Honoured: every field is read and applied (or refused, failing
	// closed, with a log line and bulwark_policy_fail_closed).
	Honoured Support = "honoured"
	// Partly: some fields are read; the others are reported as ignored.
	Partly Support = "partly"
	// Not: nothing of the kind is read; every object is reported.
	Not Support = "not"
)

// Kind is a resource kind of Istio or of the Kubernetes Gateway API, and
// how far Bulwark honours it.
type Kind struct {
	Group    string // "networking.istio.io"
	Resource string // "envoyfilters"
	Name     string // "EnvoyFilter"
	// Namespaced is false for cluster-scoped kinds (GatewayClass).
	Namespaced bool
	Support    Support
	// Section is the README anchor of the text saying how Bulwark
	// differs from Istio for this kind.
	Section string
	// unread, when set, says why no object of the kind is read from
	// the API server: each is reported whole, whatever it holds.
	unread string
	// ignored says what is ignored of one object of a kind that is read,
	// given its annotations and spec as decoded JSON; nil when nothing
	// can be.
	ignored func(annotations map[string]string, spec map[string]any) []string
}

// Sections of the README.
const (
	sectionUnread = "#what-bulwark-does-not-read"
	sectionXDS    = "#xds-sds-and-mtls-between-services"
	// sectionGateways is the README's "Gateways".
	sectionGateways = "#gateways"
	// sectionTelemetry is the README's "Istio's standard telemetry".
	sectionTelemetry = "#istios-standard-telemetry"
)

const (
	groupNetworking = "networking.istio.io"
	groupSecurity   = "security.istio.io"
	groupTelemetry  = "telemetry.istio.io"
	groupExtensions = "extensions.istio.io"
	groupGatewayAPI = "gateway.networking.k8s.io"
	// groupGatewayAPIX is the Gateway API's experimental group.
	groupGatewayAPIX = "gateway.networking.x-k8s.io"
	// groupInference is the Gateway API Inference Extension's.
	groupInference = "inference.networking.k8s.io"
	// groupIngress is Kubernetes' Ingress API, which Istio's istiod also
	// serves, as an ingress controller.
	groupIngress = "networking.k8s.io"
)

// kinds is the one list of kinds: the reporter watches those with
// something to report, the validating webhook warns about them, and the
// README's compatibility table is checked against it.
var kinds = []Kind{
	{Group: groupSecurity, Resource: "peerauthentications", Name: "PeerAuthentication", Namespaced: true, Support: Honoured, Section: sectionXDS},
	{Group: groupSecurity, Resource: "authorizationpolicies", Name: "AuthorizationPolicy", Namespaced: true, Support: Partly, Section: sectionXDS, ignored: ignoredInAuthorizationPolicy},
	{Group: groupSecurity, Resource: "requestauthentications", Name: "RequestAuthentication", Namespaced: true, Support: Partly, Section: sectionXDS, ignored: ignoredInRequestAuthentication},
	{Group: groupNetworking, Resource: "destinationrules", Name: "DestinationRule", Namespaced: true, Support: Partly, Section: sectionXDS, ignored: ignoredInDestinationRule},
	{Group: groupNetworking, Resource: "serviceentries", Name: "ServiceEntry", Namespaced: true, Support: Partly, Section: sectionXDS, ignored: ignoredInServiceEntry},
	{Group: groupNetworking, Resource: "workloadentries", Name: "WorkloadEntry", Namespaced: true, Support: Partly, Section: sectionUnread, unread: "WorkloadEntries are read from --configDir only, not from the API server"},
	// Read by routers (ingress gateways); what they leave out is
	// reported by path (ignoredrouting.go).
	{Group: groupNetworking, Resource: "virtualservices", Name: "VirtualService", Namespaced: true, Support: Partly, Section: sectionGateways, ignored: ignoredInVirtualService},
	{Group: groupNetworking, Resource: "gateways", Name: "Gateway", Namespaced: true, Support: Partly, Section: sectionGateways, ignored: ignoredInGateway},
	// Read by Envoy sidecars: egress hosts scope what each proxy gets
	// (ignoredsidecar.go says what is not honoured).
	{Group: groupNetworking, Resource: "sidecars", Name: "Sidecar", Namespaced: true, Support: Partly, Section: sectionXDS, ignored: ignoredInSidecar},
	{Group: groupNetworking, Resource: "workloadgroups", Name: "WorkloadGroup", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupNetworking, Resource: "envoyfilters", Name: "EnvoyFilter", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupNetworking, Resource: "proxyconfigs", Name: "ProxyConfig", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	// Read by Envoy sidecars: access logging and metrics; what they leave
	// out is reported by path (ignoredtelemetry.go).
	{Group: groupTelemetry, Resource: "telemetries", Name: "Telemetry", Namespaced: true, Support: Partly, Section: sectionTelemetry, ignored: ignoredInTelemetry},
	{Group: groupExtensions, Resource: "wasmplugins", Name: "WasmPlugin", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupExtensions, Resource: "trafficextensions", Name: "TrafficExtension", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "gatewayclasses", Name: "GatewayClass", Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "gateways", Name: "Gateway", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "httproutes", Name: "HTTPRoute", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "grpcroutes", Name: "GRPCRoute", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "tcproutes", Name: "TCPRoute", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "tlsroutes", Name: "TLSRoute", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "udproutes", Name: "UDPRoute", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "referencegrants", Name: "ReferenceGrant", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "backendtlspolicies", Name: "BackendTLSPolicy", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPI, Resource: "listenersets", Name: "ListenerSet", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupGatewayAPIX, Resource: "xbackendtrafficpolicies", Name: "XBackendTrafficPolicy", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	{Group: groupInference, Resource: "inferencepools", Name: "InferencePool", Namespaced: true, Support: Not, Section: sectionUnread, unread: notRead},
	// Kubernetes' own: only the objects Istio's ingress controller would
	// serve are reported (ignoredingress.go).
	{Group: groupIngress, Resource: "ingresses", Name: "Ingress", Namespaced: true, Support: Not, Section: sectionUnread, ignored: ignoredInIngress},
	{Group: groupIngress, Resource: "ingressclasses", Name: "IngressClass", Support: Not, Section: sectionUnread, ignored: ignoredInIngressClass},
}

// notRead is why a kind Bulwark does not implement is not read.
const notRead = "Bulwark does not read this kind"

// Kinds returns every kind of Istio and of the Gateway API, and
// Kubernetes' Ingress kinds, honoured or not.
func Kinds() []Kind { return slices.Clone(kinds) }

// Reported returns the kinds of which an object may be reported: those not
// read at all, and those with fields that may be ignored.
func Reported() []Kind {
	var out []Kind
	for _, k := range kinds {
		if k.Reported() {
			out = append(out, k)
		}
	}
	return out
}

// Lookup finds the kind named name in group.
func Lookup(group, name string) (Kind, bool) {
	i := slices.IndexFunc(kinds, func(k Kind) bool { return k.Group == group && k.Name == name })
	if i < 0 {
		return Kind{}, false
	}
	return kinds[i], true
}

// String is the kind with its group, "EnvoyFilter.networking.istio.io",
// which tells Istio's Gateway from the Gateway API's.
func (k Kind) String() string { return k.Name + "." + k.Group }

// BuiltIn says whether the API server serves the kind itself, without a
// CustomResourceDefinition (Kubernetes' Ingress kinds).
func (k Kind) BuiltIn() bool { return k.Group == groupIngress }

// CRD is the name of the kind's CustomResourceDefinition.
func (k Kind) CRD() string { return k.Resource + "." + k.Group }

// Reported says whether an object of the kind may be reported as (partly)
// ignored.
func (k Kind) Reported() bool { return k.unread != "" || k.ignored != nil }

// NeedsSpec says whether what is ignored depends on an object's content,
// not only on its kind.
func (k Kind) NeedsSpec() bool { return k.unread == "" && k.ignored != nil }

// Ignored says what Bulwark ignores of an object of the kind with these
// annotations and spec (the object's JSON, decoded): for a kind it does
// not read, the whole object; for the others the fields it does not read,
// by their path, each with why. Empty when the object is honoured whole.
func (k Kind) Ignored(annotations map[string]string, spec map[string]any) []string {
	switch {
	case k.unread != "":
		return []string{"the whole object: " + k.unread}
	case k.ignored == nil:
		return nil
	}
	return k.ignored(annotations, spec)
}
