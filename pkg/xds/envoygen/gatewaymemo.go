package envoygen

import (
	"sync"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// memoSnapshots is how many snapshots routeMemo keeps the routes of: the
// one being pushed and the one before, which proxies still catching up
// generate from.
const memoSnapshots = 2

// routeMemo keeps the route configurations of routers built from the
// last snapshots, by snapshot and resource key (route name and router
// scope): the routers of one scope, the push that sends their routes
// and the report of what the routes leave out translate the
// VirtualServices once per snapshot. The zero value is ready.
type routeMemo struct {
	mu    sync.Mutex
	snaps []*model.Snapshot // oldest first
	built map[*model.Snapshot]map[string]*memoRoute
}

type memoRoute struct {
	once     sync.Once
	hosts    []routes.WireVirtualHost
	problems []routes.Problem
}

// get returns the virtual hosts of the route configuration of key in
// snap, built by build once while snap is among the last memoSnapshots
// asked for. What it returns is shared: not to be changed.
func (m *routeMemo) get(snap *model.Snapshot, key string, build func() ([]routes.WireVirtualHost, []routes.Problem)) ([]routes.WireVirtualHost, []routes.Problem) {
	m.mu.Lock()
	byKey, ok := m.built[snap]
	if !ok {
		if m.built == nil {
			m.built = map[*model.Snapshot]map[string]*memoRoute{}
		}
		if len(m.snaps) == memoSnapshots {
			delete(m.built, m.snaps[0])
			m.snaps = append(m.snaps[:0], m.snaps[1:]...)
		}
		byKey = map[string]*memoRoute{}
		m.built[snap] = byKey
		m.snaps = append(m.snaps, snap)
	}
	r, ok := byKey[key]
	if !ok {
		r = &memoRoute{}
		byKey[key] = r
	}
	m.mu.Unlock()
	r.once.Do(func() { r.hosts, r.problems = build() })
	return r.hosts, r.problems
}
