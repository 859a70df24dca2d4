package interop

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	networkingapi "istio.io/api/networking/v1"
	securityapi "istio.io/api/security/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	istiomodel "istio.io/istio/pilot/pkg/model"
	networkingutil "istio.io/istio/pilot/pkg/networking/util"
	"istio.io/istio/pilot/test/xdstest"
	corev1 "k8s.io/api/core/v1"
)

// Type URLs of the filters the checks look for.
const (
	netRBACType    = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"
	tcpProxyType   = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	hcmType        = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	httpRBACType   = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
	httpRouterType = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
)

// TestSidecarConfigSecurity checks our generator's configuration of every
// sidecar of every scenario against what security requires, whatever
// Istio does:
//   - outbound: a cluster toward workloads labelled
//     security.istio.io/tlsMode=istio originates Istio mTLS (the workload
//     certificate "default" and the root "ROOTCA" from pilot-agent's SDS
//     over sds-grpc, exactly the SPIFFE IDs of the service's workloads as
//     SANs), through transport_socket_matches {tlsMode: istio} first and a
//     plaintext catch-all last, or a transport_socket when a
//     DestinationRule says ISTIO_MUTUAL; the endpoints of labelled
//     workloads carry the match's metadata, but where the workload's
//     PeerAuthentication disables mTLS on the port, and no other endpoint
//     does;
//   - inbound: every chain that terminates TLS requires a client
//     certificate validated against ROOTCA from sds-grpc;
//   - a workload selected by an AuthorizationPolicy has RBAC on every
//     inbound chain of virtualInbound but the 15006 loop guard: network
//     RBAC before tcp_proxy, HTTP RBAC before the router, a filter for
//     each action of its policies, DENY before ALLOW.
func TestSidecarConfigSecurity(t *testing.T) {
	w := newMeshObjects(t)
	for _, sc := range sidecarScenarios {
		t.Run(sc.name, func(t *testing.T) {
			ours := ourSide(t, w, sc)
			pol := newPolicies(t, sc)
			for _, key := range sc.pods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) { reportAll(t, securityProblems(w, pol, pod, ours[key])) })
			}
		})
	}
}

// securityProblems are the security checks' findings on cfg, the
// configuration of pod's sidecar, by check.
func securityProblems(w *meshObjects, pol *policies, pod *corev1.Pod, cfg *sidecarResources) map[string][]error {
	return map[string][]error{
		"outbound mTLS": outboundMTLSProblems(w, pol, pod, cfg),
		"inbound mTLS":  inboundMTLSProblems(cfg),
		"RBAC":          rbacProblems(pol, pod, cfg),
	}
}

// reportAll fails t with every problem found.
func reportAll(t *testing.T, problems map[string][]error) {
	t.Helper()
	for _, check := range slices.Sorted(maps.Keys(problems)) {
		for _, err := range problems[check] {
			t.Errorf("%s: %v", check, err)
		}
	}
}

// policies are a scenario's Istio objects, typed.
type policies struct {
	peers []*securityv1.PeerAuthentication
	authz []*securityv1.AuthorizationPolicy
	rules []*networkingv1.DestinationRule
}

func newPolicies(t *testing.T, sc sidecarScenario) *policies {
	p := &policies{}
	for _, o := range decodeIstio(t, sc.istio) {
		switch o := o.(type) {
		case *securityv1.PeerAuthentication:
			p.peers = append(p.peers, o)
		case *securityv1.AuthorizationPolicy:
			p.authz = append(p.authz, o)
		case *networkingv1.DestinationRule:
			p.rules = append(p.rules, o)
		}
	}
	return p
}

// destinationRule is the rule Istio applies to host for a client of
// clientNS: of the client's namespace, else of the service's, else of the
// root namespace. As in Istio (model.ResolveShortnameToFQDN) only a host
// without a dot is a short name, of the rule's namespace; "name.namespace"
// is taken as it is, and names no Kubernetes service.
// The first namespace with a rule for host decides: a rule of the
// client's namespace whose workloadSelector matches the client's labels,
// else its rule without a selector, else none (Istio's
// SidecarScope.DestinationRule).
func (p *policies) destinationRule(host string, client *corev1.Pod, serviceNS string) *networkingapi.DestinationRule {
	for _, ns := range []string{client.Namespace, serviceNS, "istio-system"} {
		found := false
		var catchAll *networkingapi.DestinationRule
		for _, dr := range p.rules {
			h := dr.Spec.GetHost()
			if !strings.Contains(h, ".") {
				h += "." + dr.Namespace + ".svc.cluster.local"
			}
			if dr.Namespace != ns || h != host {
				continue
			}
			found = true
			switch sel := dr.Spec.GetWorkloadSelector(); {
			case sel == nil:
				if catchAll == nil {
					catchAll = &dr.Spec
				}
			case ns == client.Namespace && labelsMatch(sel.GetMatchLabels(), client.Labels):
				return &dr.Spec
			}
		}
		if found {
			return catchAll
		}
	}
	return nil
}

// tlsMode is the DestinationRule TLS mode of a cluster, merged as Istio
// merges the rule's, its port's and its subset's traffic policies (with
// Istio's own function); nil when the rule says nothing.
func (p *policies) tlsMode(host string, client *corev1.Pod, serviceNS, subset string, port int) (*networkingapi.ClientTLSSettings, []string) {
	dr := p.destinationRule(host, client, serviceNS)
	if dr == nil {
		return nil, nil
	}
	var subsetPolicy *networkingapi.TrafficPolicy
	var labels []string
	for _, s := range dr.GetSubsets() {
		if s.GetName() == subset {
			subsetPolicy = s.GetTrafficPolicy()
			for k, v := range s.GetLabels() {
				labels = append(labels, k+"="+v)
			}
		}
	}
	merged := networkingutil.MergeSubsetTrafficPolicy(dr.GetTrafficPolicy(), subsetPolicy, &istiomodel.Port{Port: port})
	return merged.GetTls(), labels
}

// mtlsMode is the PeerAuthentication mode of pod's port, as Istio resolves
// it: the policy selecting the workload (its port-level mode first), else
// its namespace's, else the root namespace's; UNSET inherits; PERMISSIVE by
// default. (One policy per level in these scenarios, so which of several
// wins does not arise.)
func (p *policies) mtlsMode(pod *corev1.Pod, port uint32) securityapi.PeerAuthentication_MutualTLS_Mode {
	var workload, namespace, root *securityapi.PeerAuthentication
	for _, pa := range p.peers {
		hasSelector := len(pa.Spec.GetSelector().GetMatchLabels()) > 0
		switch {
		case pa.Namespace == pod.Namespace && hasSelector && labelsMatch(pa.Spec.GetSelector().GetMatchLabels(), pod.Labels):
			workload = &pa.Spec
		case pa.Namespace == pod.Namespace && !hasSelector:
			namespace = &pa.Spec
		case pa.Namespace == "istio-system" && !hasSelector:
			root = &pa.Spec
		}
	}
	if m := workload.GetPortLevelMtls()[port].GetMode(); m != securityapi.PeerAuthentication_MutualTLS_UNSET {
		return m
	}
	for _, pa := range []*securityapi.PeerAuthentication{workload, namespace, root} {
		if m := pa.GetMtls().GetMode(); m != securityapi.PeerAuthentication_MutualTLS_UNSET {
			return m
		}
	}
	return securityapi.PeerAuthentication_MutualTLS_PERMISSIVE
}

// selecting returns the actions of the AuthorizationPolicies that select
// pod: of its namespace or the root namespace, with a matching selector or
// none.
func (p *policies) selecting(pod *corev1.Pod) []string {
	var out []string
	for _, ap := range p.authz {
		if ap.Namespace != pod.Namespace && ap.Namespace != "istio-system" {
			continue
		}
		if !labelsMatch(ap.Spec.GetSelector().GetMatchLabels(), pod.Labels) {
			continue
		}
		a := ap.Spec.GetAction().String()
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// parseOutbound splits "outbound|<port>|<subset>|<host>".
func parseOutbound(name string) (port int, subset, host string, ok bool) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 || parts[0] != "outbound" {
		return 0, "", "", false
	}
	port, err := strconv.Atoi(parts[1])
	return port, parts[2], parts[3], err == nil
}

// outboundMTLSProblems checks every outbound cluster's upstream TLS.
func outboundMTLSProblems(w *meshObjects, pol *policies, client *corev1.Pod, cfg *sidecarResources) []error {
	loads := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, cla := range cfg.endpoints {
		loads[cla.GetClusterName()] = cla
	}
	var errs []error
	checked := 0
	for _, c := range cfg.clusters {
		port, subset, host, ok := parseOutbound(c.GetName())
		if !ok {
			continue
		}
		var svc *corev1.Service
		for _, s := range w.services {
			if serviceFQDN(s) == host {
				svc = s
			}
		}
		if svc == nil {
			errs = append(errs, fmt.Errorf("cluster %s: no such service", c.GetName()))
			continue
		}
		tls, subsetLabels := pol.tlsMode(host, client, svc.Namespace, subset, port)
		var sans []string
		istioEndpoints := false
		for _, p := range w.endpointPods(svc) {
			if id := podSPIFFEID(p); !slices.Contains(sans, id) {
				sans = append(sans, id)
			}
			if p.Labels["security.istio.io/tlsMode"] == "istio" && subsetSelects(subsetLabels, p.Labels) {
				istioEndpoints = true
			}
		}
		slices.Sort(sans)
		wrap := func(what string, err error) {
			if err != nil {
				errs = append(errs, fmt.Errorf("cluster %s (%s): %w", c.GetName(), what, err))
			}
		}
		// DISABLE is the zero mode: a rule without TLS settings is nil.
		switch mode := tls.GetMode(); {
		case tls == nil && svc.Spec.ClusterIP == corev1.ClusterIPNone:
			// Headless: an ORIGINAL_DST cluster has no endpoint metadata
			// to choose by, so Istio's auto-mTLS is mTLS for all when
			// every endpoint has a sidecar, else plaintext for all.
			if !allIstio(w, pol, svc, port) {
				if s := transportSocketTLS(c.GetTransportSocket()); s != "plaintext" || len(c.GetTransportSocketMatches()) > 0 {
					wrap("headless toward a workload without a sidecar", fmt.Errorf("%s, want plaintext", clusterTLS(c)))
				}
				continue
			}
			checked++
			if c.GetType() != clusterv3.Cluster_ORIGINAL_DST || len(c.GetTransportSocketMatches()) > 0 {
				wrap("headless auto-mTLS", fmt.Errorf("%s cluster with %d transport_socket_matches, want ORIGINAL_DST and one socket", c.GetType(), len(c.GetTransportSocketMatches())))
			}
			wrap("headless auto-mTLS", checkIstioUpstreamTLS(c.GetTransportSocket(), sans))
		case tls == nil:
			if !istioEndpoints {
				continue
			}
			checked++
			wrap("auto-mTLS toward workloads labelled tlsMode=istio", checkAutoMTLS(c, sans))
			wrap("auto-mTLS endpoints", checkEndpointMetadata(w, pol, loads[c.GetName()]))
		case mode == networkingapi.ClientTLSSettings_DISABLE:
			// Plaintext, as the DestinationRule says; the simulation
			// compares it with Istio's.
		case mode == networkingapi.ClientTLSSettings_ISTIO_MUTUAL:
			checked++
			if len(c.GetTransportSocketMatches()) > 0 {
				wrap("DestinationRule ISTIO_MUTUAL", errors.New("transport_socket_matches, whose plaintext catch-all would send plaintext to workloads without the label"))
			}
			wrap("DestinationRule ISTIO_MUTUAL", checkIstioUpstreamTLS(c.GetTransportSocket(), sans))
		case mode == networkingapi.ClientTLSSettings_SIMPLE || mode == networkingapi.ClientTLSSettings_MUTUAL:
			if len(c.GetTransportSocketMatches()) > 0 {
				wrap("DestinationRule "+mode.String(), errors.New("transport_socket_matches: auto-mTLS overrides the rule"))
			}
			wrap("DestinationRule "+mode.String(), checkOriginationTLS(c.GetTransportSocket(), tls))
		default:
			wrap("DestinationRule", fmt.Errorf("the test does not judge TLS mode %s", mode))
		}
	}
	if checked == 0 {
		errs = append(errs, errors.New("no outbound cluster originates Istio mTLS"))
	}
	return errs
}

// allIstio reports whether svc has endpoints and every one is a pod
// labelled tlsMode=istio whose PeerAuthentication does not disable mTLS
// on the service port's target port.
func allIstio(w *meshObjects, pol *policies, svc *corev1.Service, port int) bool {
	pods := w.endpointPods(svc)
	if len(pods) == 0 {
		return false
	}
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) != port {
			continue
		}
		for _, p := range pods {
			if p.Labels["security.istio.io/tlsMode"] != "istio" ||
				pol.mtlsMode(p, uint32(numericTargetPort(sp))) == securityapi.PeerAuthentication_MutualTLS_DISABLE {
				return false
			}
		}
	}
	return true
}

func subsetSelects(labels []string, podLabels map[string]string) bool {
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		if podLabels[k] != v {
			return false
		}
	}
	return true
}

// checkAutoMTLS checks transport_socket_matches: {tlsMode: istio} first,
// with Istio mTLS; a catch-all last, plaintext; no transport_socket beside
// them.
func checkAutoMTLS(c *clusterv3.Cluster, sans []string) error {
	ms := c.GetTransportSocketMatches()
	if len(ms) < 2 {
		return fmt.Errorf("%d transport_socket_matches, want {tlsMode: istio} first and a plaintext catch-all last (TLS: %s)", len(ms), clusterTLS(c))
	}
	var errs []error
	if c.GetTransportSocket() != nil {
		errs = append(errs, errors.New("transport_socket beside transport_socket_matches"))
	}
	first, last := ms[0], ms[len(ms)-1]
	if f := first.GetMatch().GetFields(); len(f) != 1 || f["tlsMode"].GetStringValue() != "istio" {
		errs = append(errs, fmt.Errorf("first match %s, want {tlsMode=istio}", structString(first.GetMatch())))
	}
	if err := checkIstioUpstreamTLS(first.GetTransportSocket(), sans); err != nil {
		errs = append(errs, fmt.Errorf("match %s: %w", structString(first.GetMatch())+"", err))
	}
	if len(last.GetMatch().GetFields()) != 0 {
		errs = append(errs, fmt.Errorf("last match %s is not a catch-all", structString(last.GetMatch())))
	}
	if s := transportSocketTLS(last.GetTransportSocket()); s != "plaintext" {
		errs = append(errs, fmt.Errorf("catch-all is %s, want plaintext", s))
	}
	return errors.Join(errs...)
}

// checkEndpointMetadata checks that exactly the endpoints of workloads
// labelled tlsMode=istio whose PeerAuthentication does not DISABLE mTLS on
// the endpoint's port carry envoy.transport_socket_match {tlsMode: istio}
// (Istio's EDS drops the mark where the server disables mTLS). Without it
// auto-mTLS sends plaintext; with it toward a workload that has no sidecar
// or disabled mTLS, TLS the workload cannot answer.
func checkEndpointMetadata(w *meshObjects, pol *policies, cla *endpointv3.ClusterLoadAssignment) error {
	if cla == nil {
		return errors.New("no ClusterLoadAssignment")
	}
	byIP := map[string]*corev1.Pod{}
	for _, p := range w.pods {
		byIP[p.Status.PodIP] = p
	}
	var errs []error
	for _, loc := range cla.GetEndpoints() {
		for _, e := range loc.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			pod := byIP[sa.GetAddress()]
			want := pod != nil && pod.Labels["security.istio.io/tlsMode"] == "istio" &&
				pol.mtlsMode(pod, sa.GetPortValue()) != securityapi.PeerAuthentication_MutualTLS_DISABLE
			got := e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue() == "istio"
			if got != want {
				errs = append(errs, fmt.Errorf("endpoint %s:%d: tlsMode=istio match metadata %v, want %v", sa.GetAddress(), sa.GetPortValue(), got, want))
			}
		}
	}
	return errors.Join(errs...)
}

// inboundMTLSProblems checks every TLS-terminating chain of every inbound
// listener.
func inboundMTLSProblems(cfg *sidecarResources) []error {
	var errs []error
	for _, l := range cfg.listeners {
		if l.GetTrafficDirection() != corev3.TrafficDirection_INBOUND && l.GetName() != "virtualInbound" {
			continue
		}
		for _, fc := range listenerChains(l) {
			if fc.GetTransportSocket() == nil {
				continue
			}
			if err := checkInboundMTLS(fc.GetTransportSocket()); err != nil {
				errs = append(errs, fmt.Errorf("listener %s chain %q (%v): %w", l.GetName(), fc.GetName(), fc.GetFilterChainMatch(), err))
			}
		}
	}
	return errs
}

// rbacProblems checks the RBAC filters of virtualInbound's chains when
// policies select pod.
func rbacProblems(pol *policies, pod *corev1.Pod, cfg *sidecarResources) []error {
	var want []string
	var errs []error
	for _, a := range pol.selecting(pod) {
		switch a {
		case securityapi.AuthorizationPolicy_ALLOW.String(), securityapi.AuthorizationPolicy_DENY.String():
			want = append(want, a)
		default:
			errs = append(errs, fmt.Errorf("the test does not judge AuthorizationPolicy action %s", a))
		}
	}
	if len(want) == 0 {
		return errs // no AuthorizationPolicy selects the workload
	}
	l := xdstest.ExtractListener("virtualInbound", cfg.listeners)
	if l == nil {
		return append(errs, errors.New("no virtualInbound listener"))
	}
	for _, fc := range listenerChains(l) {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() == inboundPort {
			continue
		}
		got, err := rbacActions(fc)
		if err == nil {
			err = checkActions(got, want)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("chain %q (%v): %w", fc.GetName(), fc.GetFilterChainMatch(), err))
		}
	}
	return errs
}

// checkActions checks that every action wanted is enforced and DENY comes
// before ALLOW.
func checkActions(got, want []string) error {
	var errs []error
	for _, a := range want {
		if !slices.Contains(got, a) {
			errs = append(errs, fmt.Errorf("no %s RBAC filter (have %v)", a, got))
		}
	}
	if i := slices.Index(got, "ALLOW"); i >= 0 && slices.Contains(got[i:], "DENY") {
		errs = append(errs, fmt.Errorf("RBAC filters in order %v: DENY must come before ALLOW", got))
	}
	return errors.Join(errs...)
}

// rbacActions returns the actions, in order, of the enforcing RBAC filters
// a connection or request meets before the chain's terminal filter
// (tcp_proxy, or the HTTP router).
func rbacActions(fc *listenerv3.FilterChain) ([]string, error) {
	var out []string
	for _, f := range fc.GetFilters() {
		switch f.GetTypedConfig().GetTypeUrl() {
		case netRBACType:
			r := &netrbacv3.RBAC{}
			if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
				return nil, fmt.Errorf("network RBAC: %w", err)
			}
			out = appendAction(out, r.GetRules())
		case tcpProxyType:
			return out, nil
		case hcmType:
			h := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
				return nil, fmt.Errorf("HTTP connection manager: %w", err)
			}
			for _, hf := range h.GetHttpFilters() {
				switch hf.GetTypedConfig().GetTypeUrl() {
				case httpRBACType:
					r := &httprbacv3.RBAC{}
					if err := hf.GetTypedConfig().UnmarshalTo(r); err != nil {
						return nil, fmt.Errorf("HTTP RBAC: %w", err)
					}
					out = appendAction(out, r.GetRules())
				case httpRouterType:
					return out, nil
				}
			}
			return nil, errors.New("HTTP connection manager without a router")
		}
	}
	return nil, errors.New("no tcp_proxy or HTTP connection manager")
}

// appendAction appends the action of enforcing rules; rules unset enforce
// nothing (only shadow rules, which log).
func appendAction(out []string, rules *rbacv3.RBAC) []string {
	if rules == nil {
		return out
	}
	return append(out, rules.GetAction().String())
}
