// Package clusters joins the models of several Kubernetes clusters into
// the one the xDS generators read: the local cluster gives everything
// (services, endpoints, pods, policies), each remote cluster its services
// and their endpoints, as Istio's multi-primary and primary-remote
// istiods read remote clusters for endpoint discovery only, and its pods
// apart (model.Resources.RemotePods), where the proxies that cluster
// authenticates find their workload.
//
// Services merge by hostname (namespace sameness): a Service of one name
// and namespace is one service wherever it runs. Which cluster's Service
// defines it follows Istio's aggregate registry, where the local (config)
// cluster's registry comes first: the local cluster's Service when it has
// one, else the remote one of the least cluster ID (Istio takes the
// remote registered first, an order that depends on when secrets were
// read; Bulwark's does not). That Service gives the ports, addresses,
// selector and exportTo; every cluster's endpoints join it, each remote
// endpoint under the defining Service's port of the same name, as Istio's
// endpoint builder matches an endpoint's service port by name. Endpoints
// keep their cluster (model.Endpoint.Cluster and the
// topology.istio.io/cluster label the source adds).
//
// A merged snapshot shares every service no cluster changed with the one
// before, so an EndpointSlice change in a remote cluster is an endpoint
// change of one service to model.Diff, pushed as a local one is: only the
// load assignments that read it.
package clusters

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Merger receives the snapshots of the local cluster and of each remote
// cluster and publishes their merge. It is safe for concurrent use; a
// publication takes the time of one merge, never waits for a cluster.
type Merger struct {
	pub      model.Publisher
	log      *slog.Logger
	networks *networks

	mu     sync.Mutex
	local  *model.Snapshot
	remote map[string]*model.Snapshot
	// owner is the generation of the publisher each remote cluster's
	// snapshots are taken from: a source replaced or withdrawn may still
	// publish once, and is not heard.
	owner  map[string]uint64
	gen    uint64
	merged map[string]*mergedService // by hostname, services of several clusters
	last   *model.Snapshot
}

// mergedService is a service several clusters define, and what it was
// made of.
type mergedService struct {
	from []*model.Service
	svc  *model.Service
}

// New returns a Merger publishing to pub, its metric registered with reg
// (none when nil). Nothing is published before the local cluster's first
// snapshot.
func New(pub model.Publisher, log *slog.Logger, reg prometheus.Registerer) (*Merger, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n, err := newNetworks(log, reg)
	if err != nil {
		return nil, err
	}
	return &Merger{pub: pub, log: log, networks: n, remote: map[string]*model.Snapshot{}, owner: map[string]uint64{},
		merged: map[string]*mergedService{}}, nil
}

// Local is the publisher of the local cluster's snapshots.
func (m *Merger) Local() model.Publisher { return localPublisher{m} }

type localPublisher struct{ m *Merger }

func (p localPublisher) Publish(s *model.Snapshot) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.m.local = s
	p.m.publishLocked()
}

// Remote is the publisher of the snapshots of remote cluster id, of which
// only the services count. It replaces any publisher Remote gave for id
// before, whose snapshots are no longer taken; the last one taken stays
// in the model until the new publisher's first, so a remote source
// replaced (new credentials) leaves no gap.
func (m *Merger) Remote(id string) model.Publisher {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	m.owner[id] = m.gen
	return remotePublisher{m: m, id: id, gen: m.gen}
}

type remotePublisher struct {
	m   *Merger
	id  string
	gen uint64
}

func (p remotePublisher) Publish(s *model.Snapshot) {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner[p.id] != p.gen {
		return // replaced or withdrawn
	}
	if m.remote[p.id] == nil {
		m.log.Info("remote cluster's services joined the mesh model", "cluster", p.id,
			"services", len(s.Resources().Services))
	}
	m.remote[p.id] = s
	m.publishLocked()
}

// Remove withdraws remote cluster id: its services and endpoints leave
// the model, and the publishers Remote gave for it are no longer heard.
func (m *Merger) Remove(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.owner, id)
	if m.remote[id] == nil {
		return
	}
	delete(m.remote, id)
	m.log.Info("remote cluster's services withdrawn from the mesh model", "cluster", id)
	m.publishLocked()
}

// Clusters are the remote clusters whose services are in the model, by
// ID, with how many services each has.
func (m *Merger) Clusters() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.remote))
	for id, s := range m.remote {
		out[id] = len(s.Resources().Services)
	}
	return out
}

// publishLocked merges and publishes, once the local cluster has
// published.
func (m *Merger) publishLocked() {
	if m.local == nil {
		return
	}
	if len(m.remote) == 0 && len(m.merged) == 0 {
		m.last = m.local
		m.networks.observe(m.local.Resources().Services)
		m.pub.Publish(m.local)
		return
	}
	ids := make([]string, 0, len(m.remote))
	for id := range m.remote {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	h := sha256.New()
	h.Write([]byte(m.local.Version))
	byHost := map[string][]*model.Service{}
	var order []string // hostnames, in the order first seen
	add := func(svcs []*model.Service) {
		for _, svc := range svcs {
			if byHost[svc.Hostname] == nil {
				order = append(order, svc.Hostname)
			}
			byHost[svc.Hostname] = append(byHost[svc.Hostname], svc)
		}
	}
	add(m.local.Resources().Services)
	for _, id := range ids {
		s := m.remote[id]
		h.Write([]byte{0})
		h.Write([]byte(id))
		h.Write([]byte{0})
		h.Write([]byte(s.Version))
		add(s.Resources().Services)
	}
	services := make([]*model.Service, 0, len(order))
	merged := make(map[string]*mergedService, len(m.merged))
	for _, host := range order {
		from := byHost[host]
		if len(from) == 1 {
			services = append(services, from[0])
			continue
		}
		ms := m.merged[host]
		if ms == nil || !slices.Equal(ms.from, from) {
			ms = &mergedService{from: from, svc: mergeServices(from)}
		}
		merged[host] = ms
		services = append(services, ms.svc)
	}
	m.merged = merged
	res := *m.local.Resources()
	res.Services = services
	res.RemotePods = remotePods(m.remote, ids)
	version := hex.EncodeToString(h.Sum(nil))[:16]
	m.last = model.BuildShared(version, m.local.Options, res, m.last)
	m.networks.observe(services)
	m.pub.Publish(m.last)
}

// remotePods are the registries of pods of the remote clusters ids, by
// cluster: where the proxies each cluster authenticates are looked up,
// never in another cluster's.
func remotePods(remote map[string]*model.Snapshot, ids []string) map[string][]*model.Pod {
	out := make(map[string][]*model.Pod, len(ids))
	for _, id := range ids {
		if s := remote[id]; s.HasPods() {
			out[id] = s.Resources().Pods
		}
	}
	return out
}

// mergeServices is the service several clusters define: the first's
// definition, with every cluster's endpoints under its ports, matched by
// port name.
func mergeServices(from []*model.Service) *model.Service {
	first := from[0]
	svc := *first
	// Each cluster's Service may be its network's gateway: every
	// cluster's exposure is kept.
	svc.Exposures = nil
	for _, s := range from {
		svc.Exposures = append(svc.Exposures, s.Exposures...)
	}
	svc.Endpoints = make(map[uint32][]model.Endpoint, len(first.Ports))
	for _, p := range first.Ports {
		n := 0
		for _, s := range from {
			if q, ok := portNamed(s, p.Name); ok {
				n += len(s.Endpoints[q])
			}
		}
		if n == 0 {
			continue
		}
		eps := make([]model.Endpoint, 0, n)
		for _, s := range from {
			if q, ok := portNamed(s, p.Name); ok {
				eps = append(eps, s.Endpoints[q]...)
			}
		}
		slices.SortStableFunc(eps, func(a, b model.Endpoint) int {
			return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
		})
		svc.Endpoints[p.Port] = eps
	}
	return &svc
}

// portNamed is the number of s's port named name.
func portNamed(s *model.Service, name string) (uint32, bool) {
	for _, p := range s.Ports {
		if p.Name == name {
			return p.Port, true
		}
	}
	return 0, false
}
