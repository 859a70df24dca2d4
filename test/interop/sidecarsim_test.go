package interop

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"istio.io/istio/pilot/pkg/simulation"
	"istio.io/istio/pilot/test/xdstest"
)

// TestSidecarSimulation runs Istio's simulator of Envoy's matching
// (pilot/pkg/simulation) on the configuration Istio's own generator gives a
// sidecar and on the one ours (envoygen, over the model kubesource builds
// from the same Kubernetes objects and Istio configuration) gives it, for
// every scenario and a matrix of inbound and outbound connections, and
// compares what Envoy would decide: the error, the listener, the kind of
// filter chain (TLS terminated, client certificate required, HTTP or TCP)
// and the cluster. Filter chain, virtual host and route names are printed
// but not compared. It also compares the names of listeners, clusters and
// routes, every route configuration field by field (compareRouteConfigs:
// default routes with their retry policy and timeouts), each cluster's
// type, upstream TLS and upstream protocol options, and each ClusterLoadAssignment's endpoints and
// their auto-mTLS marks. As a
// control, the checks of TestSidecarConfigValid and
// TestSidecarConfigSecurity run on Istio's configuration, which they must
// pass, and on copies of it with faults injected, which they must find.
//
// The simulator's Simulation keeps an unexported *testing.T, used only to
// fail the test when a filter or TLS context does not unmarshal, a route
// has an unknown path match or a CIDR does not parse; with a zero T, Run
// works until it meets such a fault, and then panics on the nil T. So our
// configuration runs in a copy of the Simulation NewSimulation built for
// Istio's (a copy carries the unexported field), with its three exported
// fields replaced: Run then fails the pod's test with the simulator's own
// message. Calls run one after another in the pod's test, whose goroutine
// the T belongs to.
func TestSidecarSimulation(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	used := map[int]bool{}
	// ran counts the subtests that compare, to tell whether -run left any
	// out: only a complete run can tell an allowed difference is stale.
	ran, want := 0, 0
	for _, sc := range sidecarScenarios {
		want += 3 * len(sc.pods)
		t.Run(sc.name, func(t *testing.T) {
			s := istioServer(t, sc)
			ours := ourSide(t, w, sc)
			pol := newPolicies(t, sc)
			for _, key := range sc.pods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) {
					proxy := istioProxy(s, pod)
					istioSim := simulation.NewSimulation(t, s, proxy)
					ourSim := *istioSim
					ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours[key].listeners, ours[key].clusters, ours[key].routes
					istioEndpoints := s.Endpoints(proxy)
					// The checks of TestSidecarConfigValid and
					// TestSidecarConfigSecurity pass on Istio's own
					// configuration, and find faults injected into it.
					t.Run("control", func(t *testing.T) {
						cfg := &sidecarResources{listeners: istioSim.Listeners, clusters: istioSim.Clusters, routes: istioSim.Routes, endpoints: istioEndpoints}
						checkConfigValid(t, cfg)
						reportAll(t, securityProblems(w, pol, pod, cfg))
						checkFaultsFound(t, w, pol, pod, cfg)
					})
					t.Run("resources", func(t *testing.T) {
						ran++
						d := &differences{t: t, scenario: sc.name, used: used}
						compareResourceNames(d, istioSim, &ourSim)
						d.logAllowed()
					})
					// Route configurations field by field: default
					// routes (retry policy, timeouts, hash policy) and
					// virtual hosts as Istio's.
					t.Run("routes", func(t *testing.T) {
						compareRouteConfigs(t, istioSim.Routes, ourSim.Routes)
					})
					t.Run("clusters", func(t *testing.T) {
						ran++
						d := &differences{t: t, scenario: sc.name, used: used}
						compareClusterTLS(d, istioSim, &ourSim)
						compareEndpoints(d, istioEndpoints, ours[key].endpoints)
						d.logAllowed()
					})
					ran++
					d := &differences{t: t, scenario: sc.name, used: used}
					calls := append(inboundCalls(w, pod), outboundCalls(w, pod)...)
					for _, c := range calls {
						want, got := simulate(istioSim, c.call), simulate(&ourSim, c.call)
						d.check("call "+c.name, want.String(), got.String(),
							fmt.Sprintf("\n  istio details: %s\n  ours details:  %s", want.details(), got.details()))
					}
					d.logAllowed()
					if d.count > 0 {
						t.Logf("%d of %d calls decided differently", d.count, len(calls))
					}
				})
			}
		})
	}
	if ran == want {
		for i, a := range allowedDifferences {
			if !used[i] {
				t.Errorf("allowed difference %d (%s) no longer occurs; delete it", i, a.reason)
			}
		}
	}
}

// decision is what Envoy decides for a call, as far as it is compared.
type decision struct {
	Error    string // "" for none
	Listener string
	Chain    string // chainKind of the filter chain, "" when not reached
	Cluster  string
}

func (d decision) String() string {
	e := d.Error
	if e == "" {
		e = "ok"
	}
	return fmt.Sprintf("%s, listener %q, chain %s, cluster %q", e, d.Listener, orDash(d.Chain), d.Cluster)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// outcome is a Run's result and the decision drawn from it.
type outcome struct {
	decision
	result simulation.Result
}

func (o outcome) details() string {
	r := o.result
	return fmt.Sprintf("chain %q, route config %q, virtual host %q, route %q",
		r.FilterChainMatched, r.RouteConfigMatched, r.VirtualHostMatched, r.RouteMatched)
}

// simulate runs c in sim. The matched filter chain is captured by a custom
// validation, which Run calls with the chain once TLS has been checked.
func simulate(sim *simulation.Simulation, c simulation.Call) outcome {
	var fc *listenerv3.FilterChain
	c.CustomListenerValidations = append(c.CustomListenerValidations, func(chain *listenerv3.FilterChain) error {
		fc = chain
		return nil
	})
	r := sim.Run(c)
	d := decision{Listener: r.ListenerMatched, Cluster: r.ClusterMatched}
	if r.Error != nil {
		d.Error = r.Error.Error()
	}
	if fc != nil {
		d.Chain = chainKind(fc)
	}
	return outcome{decision: d, result: r}
}

// chainKind says what a filter chain does with a connection: whether it
// terminates TLS and requires a client certificate, and whether it is
// HTTP (an HTTP connection manager) or TCP (tcp_proxy).
func chainKind(fc *listenerv3.FilterChain) string {
	tls := "plaintext"
	if ts := fc.GetTransportSocket(); ts != nil {
		tls = "TLS"
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
			tls = "TLS(undecodable: " + err.Error() + ")"
		} else if ctx.GetRequireClientCertificate().GetValue() {
			tls = "mTLS"
		}
	}
	var kinds []string
	for _, f := range fc.GetFilters() {
		switch f.GetTypedConfig().GetTypeUrl() {
		case hcmType:
			kinds = append(kinds, "HTTP")
		case tcpProxyType:
			kinds = append(kinds, "TCP")
		}
	}
	if len(kinds) == 0 {
		kinds = []string{"no-terminal-filter"}
	}
	return tls + "/" + strings.Join(kinds, "+")
}

// allowedDifference is a difference between Istio's configuration or
// decision and ours that is intended: what is compared (subject) in the
// scenarios named, where Istio's side renders as istio and ours as ours.
type allowedDifference struct {
	scenario *regexp.Regexp // nil: every scenario
	subject  *regexp.Regexp // "call <name>", "listener <name>", "cluster <name>", "route <name>", "cluster TLS <name>", "endpoints <name>"
	istio    string
	ours     string
	reason   string
}

// allowedDifferences is the one list of the differences accepted between
// Istio and us. Every entry must still occur (checked when every scenario
// runs), so an entry goes once the generator agrees with Istio.
var allowedDifferences = []allowedDifference{}

// allowedIndex returns the index of the entry of list that accepts the
// difference, or -1.
func allowedIndex(list []allowedDifference, scenario, subject, istio, ours string) int {
	for i, a := range list {
		if (a.scenario == nil || a.scenario.MatchString(scenario)) && a.subject.MatchString(subject) && a.istio == istio && a.ours == ours {
			return i
		}
	}
	return -1
}

// differences reports what differs between Istio and us, but for the
// allowed differences.
type differences struct {
	t        *testing.T
	scenario string
	used     map[int]bool
	count    int         // differences reported
	allowed  map[int]int // differences allowed, by entry
	// list is the allowed differences; nil: allowedDifferences.
	list []allowedDifference
}

func (d *differences) allowedList() []allowedDifference {
	if d.list != nil {
		return d.list
	}
	return allowedDifferences
}

func (d *differences) check(subject, istio, ours, details string) {
	d.t.Helper()
	if istio == ours {
		return
	}
	if i := allowedIndex(d.allowedList(), d.scenario, subject, istio, ours); i >= 0 {
		d.used[i] = true
		if d.allowed == nil {
			d.allowed = map[int]int{}
		}
		d.allowed[i]++
		return
	}
	d.count++
	d.t.Errorf("%s:\n  istio: %s\n  ours:  %s%s", subject, istio, ours, details)
}

// logAllowed logs how many differences each allowed entry accepted.
func (d *differences) logAllowed() {
	for _, i := range slices.Sorted(maps.Keys(d.allowed)) {
		d.t.Logf("%d allowed differences: %s", d.allowed[i], d.allowedList()[i].reason)
	}
}

// compareResourceNames compares which listeners, clusters and routes
// each side has.
func compareResourceNames(d *differences, istioSim, ourSim *simulation.Simulation) {
	d.t.Helper()
	diffNames(d, "listener", xdstest.ExtractListenerNames(istioSim.Listeners), xdstest.ExtractListenerNames(ourSim.Listeners))
	diffNames(d, "cluster", xdstest.MapKeys(xdstest.ExtractClusters(istioSim.Clusters)), xdstest.MapKeys(xdstest.ExtractClusters(ourSim.Clusters)))
	diffNames(d, "route", xdstest.MapKeys(xdstest.ExtractRouteConfigurations(istioSim.Routes)), xdstest.MapKeys(xdstest.ExtractRouteConfigurations(ourSim.Routes)))
}

func diffNames(d *differences, what string, istio, ours []string) {
	d.t.Helper()
	present := func(list []string, n string) string {
		if slices.Contains(list, n) {
			return "present"
		}
		return "absent"
	}
	all := slices.Concat(istio, ours)
	slices.Sort(all)
	for _, n := range slices.Compact(all) {
		d.check(what+" "+n, present(istio, n), present(ours, n), "")
	}
}

// compareClusterTLS compares, for every cluster both generate, its type,
// what it does about upstream TLS (clusterTLS), and its upstream protocol
// and common HTTP options (upstreamProtocolOptions).
func compareClusterTLS(d *differences, istioSim, ourSim *simulation.Simulation) {
	d.t.Helper()
	ours := xdstest.ExtractClusters(ourSim.Clusters)
	for _, ic := range istioSim.Clusters {
		oc, ok := ours[ic.GetName()]
		if !ok {
			continue // compareResourceNames reports it
		}
		d.check("cluster TLS "+ic.GetName(), ic.GetType().String()+" "+clusterTLS(ic), oc.GetType().String()+" "+clusterTLS(oc), "")
		d.check("cluster upstream HTTP options "+ic.GetName(), autoSNI(ic), autoSNI(oc), "")
		d.check("cluster upstream protocol "+ic.GetName(), upstreamProtocolOptions(d.t, ic), upstreamProtocolOptions(d.t, oc), "")
		if ictx, octx := originationContext(ic), originationContext(oc); (ictx != nil || octx != nil) && !proto.Equal(ictx, octx) {
			d.check("cluster origination TLS context "+ic.GetName(), prototext.Format(ictx), prototext.Format(octx), "")
		}
	}
}

// compareEndpoints compares, for every ClusterLoadAssignment both
// generate, its endpoints and which carry the auto-mTLS mark.
func compareEndpoints(d *differences, istio, ours []*endpointv3.ClusterLoadAssignment) {
	d.t.Helper()
	byName := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, cla := range ours {
		byName[cla.GetClusterName()] = cla
	}
	for _, ic := range istio {
		oc, ok := byName[ic.GetClusterName()]
		if !ok {
			d.check("endpoints "+ic.GetClusterName(), "present", "absent", "")
			continue
		}
		d.check("endpoints "+ic.GetClusterName(), endpointsString(ic), endpointsString(oc), "")
	}
}

// endpointsString lists a ClusterLoadAssignment's endpoints, sorted, with
// their tlsMode transport socket match.
func endpointsString(cla *endpointv3.ClusterLoadAssignment) string {
	var eps []string
	for _, loc := range cla.GetEndpoints() {
		for _, e := range loc.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			mode := e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
			eps = append(eps, fmt.Sprintf("%s:%d tlsMode=%s", a.GetAddress(), a.GetPortValue(), orDash(mode)))
		}
	}
	slices.Sort(eps)
	return "[" + strings.Join(eps, ", ") + "]"
}
