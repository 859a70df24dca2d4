package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// checkOne checks one resource of a response and records its deps.
func (a *ads) checkOne(chk *checker, url, name string, h *heldResource) error {
	var err error
	switch m := h.msg.(type) {
	case *clusterv3.Cluster:
		h.deps, err = chk.cluster(name, m)
	case *endpointv3.ClusterLoadAssignment:
		err = chk.endpoints(name, m)
	case *listenerv3.Listener:
		h.deps, err = chk.listener(name, m)
	case *routev3.RouteConfiguration:
		err = chk.route(name, m)
	case *tlsv3.Secret:
		if m.GetName() != name {
			err = fmt.Errorf("secret '%s': the response names it '%s'", name, m.GetName())
		} else if verr := m.ValidateAll(); verr != nil {
			err = fmt.Errorf("secret '%s': %w", name, verr)
		}
	default:
		err = fmt.Errorf("resource '%s': unexpected %T for %s", name, m, shortType(url))
	}
	return err
}

// withoutKey is m with a secret's private key left out, for the state
// file.
func withoutKey(m proto.Message) proto.Message {
	s, ok := m.(*tlsv3.Secret)
	if !ok || s.GetTlsCertificate().GetPrivateKey() == nil {
		return m
	}
	c := proto.Clone(s).(*tlsv3.Secret)
	c.GetTlsCertificate().PrivateKey = nil
	return c
}

// duplicateAddresses refuses two listeners that bind one address.
func duplicateAddresses(boot *bootInfo, listeners map[string]*heldResource) error {
	owner := map[string]string{}
	for name, addr := range boot.staticListeners {
		owner[addr] = name
	}
	for _, name := range slices.Sorted(maps.Keys(listeners)) {
		l := listeners[name].msg.(*listenerv3.Listener)
		if b := l.GetBindToPort(); b != nil && !b.GetValue() {
			continue
		}
		addrs := []*corev3.Address{l.GetAddress()}
		for _, extra := range l.GetAdditionalAddresses() {
			addrs = append(addrs, extra.GetAddress())
		}
		for _, ad := range addrs {
			k := boundAddress(ad)
			if other, ok := owner[k]; ok && other != name {
				return fmt.Errorf("listener '%s' has duplicate address '%s' as existing listener '%s'", name, k, other)
			}
			owner[k] = name
		}
	}
	return nil
}

var (
	successStat = map[string]string{typeCDS: "cluster_manager.cds.update_success", typeLDS: "listener_manager.lds.update_success"}
	rejectStat  = map[string]string{typeCDS: "cluster_manager.cds.update_rejected", typeLDS: "listener_manager.lds.update_rejected"}
)

// rejected counts a NACK. A first CDS or LDS response lets
// initialization go on even when rejected, as Envoy's does, so that the
// server does not hang on a bad config (it stays unready instead).
func (a *ads) rejected(t *xdsType) {
	a.firstResponse(t)
	a.st.update(func(s *State) {
		if k := rejectStat[t.url]; k != "" {
			s.Stats[k]++
		}
	})
}

func (a *ads) firstResponse(t *xdsType) {
	switch {
	case t.url == typeCDS && !a.cdsInit:
		a.cdsInit, a.initialClusters = true, slices.Sorted(maps.Keys(t.held))
	case t.url == typeLDS && !a.ldsInit:
		a.ldsInit, a.initialListeners = true, slices.Sorted(maps.Keys(t.held))
	}
}

// accepted makes next what t holds.
func (a *ads) accepted(t *xdsType, r *discoveryv3.DeltaDiscoveryResponse, next map[string]*heldResource) {
	t.held = next
	if !t.wildcard {
		for _, res := range r.GetResources() {
			t.answered[res.GetName()] = true
		}
		for _, name := range r.GetRemovedResources() {
			t.answered[name] = true
		}
	}
	a.firstResponse(t)
	a.st.update(func(s *State) {
		ts := s.typeStatus(t.url)
		ts.ACKs++
		out := make(map[string]Held, len(t.held))
		for name, h := range t.held {
			out[name] = h.json
		}
		s.Resources[shortType(t.url)] = out
		if k := successStat[t.url]; k != "" {
			s.Stats[k]++
		}
	})
}

// resubscribe asks for exactly the names wanted of t (EDS or RDS), and
// drops what is no longer wanted.
func (a *ads) resubscribe(as *adsStream, t *xdsType, wanted map[string]bool) error {
	var add, remove []string
	for name := range wanted {
		if !t.subscribed[name] {
			add = append(add, name)
		}
	}
	for name := range t.subscribed {
		if !wanted[name] {
			remove = append(remove, name)
		}
	}
	if len(add) == 0 && len(remove) == 0 {
		return nil
	}
	slices.Sort(add)
	slices.Sort(remove)
	for _, name := range remove {
		delete(t.subscribed, name)
		delete(t.answered, name)
		delete(t.held, name)
	}
	for _, name := range add {
		t.subscribed[name] = true
	}
	if len(remove) > 0 {
		a.st.update(func(s *State) {
			for _, name := range remove {
				delete(s.Resources[shortType(t.url)], name)
			}
		})
	}
	t.requested = true
	return as.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: t.url, ResourceNamesSubscribe: add, ResourceNamesUnsubscribe: remove}, "subscribe")
}

// adsSecretNames are the secrets the held clusters and listeners ask of
// ADS.
func (a *ads) adsSecretNames() map[string]bool {
	out := map[string]bool{}
	for _, ref := range a.secretRefs() {
		if ref.ADS {
			out[ref.Name] = true
		}
	}
	return out
}

func (a *ads) edsNames() map[string]bool {
	out := map[string]bool{}
	for _, h := range a.types[typeCDS].held {
		if h.deps.eds != "" {
			out[h.deps.eds] = true
		}
	}
	return out
}

func (a *ads) routeNames() map[string]bool {
	out := map[string]bool{}
	for _, h := range a.types[typeLDS].held {
		for _, r := range h.deps.routes {
			out[r] = true
		}
	}
	return out
}

func (a *ads) secretRefs() []secretRef {
	var out []secretRef
	for _, u := range []string{typeCDS, typeLDS} {
		for _, h := range a.types[u].held {
			for _, ref := range h.deps.secrets {
				if !slices.Contains(out, ref) {
					out = append(out, ref)
				}
			}
		}
	}
	return out
}

// waitsFor says what an accepted cluster or listener still waits for.
func (a *ads) waitsFor(h *heldResource) []string {
	var out []string
	if h.deps.eds != "" && !a.types[typeEDS].answered[h.deps.eds] {
		out = append(out, "EDS "+h.deps.eds)
	}
	for _, r := range h.deps.routes {
		if !a.types[typeRDS].answered[r] {
			out = append(out, "RDS "+r)
		}
	}
	for _, ref := range h.deps.secrets {
		if ref.ADS {
			// Envoy waits for it up to the source's initial fetch
			// timeout (15 s unset); the stand-in waits until answered.
			if !a.types[typeSecret].answered[ref.Name] {
				out = append(out, "SDS (ADS) "+ref.Name)
			}
			continue
		}
		if !a.sds.has(ref.Name) {
			out = append(out, "SDS "+ref.Name)
		}
	}
	return out
}

// advance asks for LDS once the initial clusters are warm, and turns the
// server LIVE once the initial listeners are, as Envoy's init does.
func (a *ads) advance(as *adsStream) error {
	warming := map[string][]string{}
	for _, u := range []string{typeCDS, typeLDS} {
		kind := map[string]string{typeCDS: "cluster", typeLDS: "listener"}[u]
		for name, h := range a.types[u].held {
			if w := a.waitsFor(h); len(w) > 0 {
				warming[kind+" "+name] = w
			}
		}
	}
	warm := func(u string, names []string) bool {
		kind := map[string]string{typeCDS: "cluster", typeLDS: "listener"}[u]
		for _, n := range names {
			if _, ok := warming[kind+" "+n]; ok {
				return false
			}
		}
		return true
	}
	if lds := a.types[typeLDS]; a.cdsInit && !lds.requested && warm(typeCDS, a.initialClusters) {
		if err := as.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeLDS}, "subscribe"); err != nil {
			return err
		}
		lds.requested = true
	}
	becameLive := a.ldsInit && !a.live && warm(typeLDS, a.initialListeners)
	if becameLive {
		a.live = true
		a.log.Info("server LIVE, workers started")
	}
	a.st.update(func(s *State) {
		s.Warming = warming
		s.Stats["cluster_manager.warming_clusters"] = uint64(countPrefix(warming, "cluster "))
		s.Stats["listener_manager.total_listeners_warming"] = uint64(countPrefix(warming, "listener "))
		if becameLive {
			now := time.Now()
			s.Server.State, s.Server.WorkersStarted, s.Server.LiveAt = "LIVE", true, &now
			s.Stats["server.state"] = 0
			s.Stats["listener_manager.workers_started"] = 1
		}
	})
	return nil
}

func countPrefix(m map[string][]string, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
