package envoygen

import (
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

func TestRouteMemoBuildsOncePerSnapshotAndKey(t *testing.T) {
	var m routeMemo
	builds := 0
	build := func() ([]routes.WireVirtualHost, []routes.Problem) {
		builds++
		return make([]routes.WireVirtualHost, 1), nil
	}
	s1, s2, s3 := &model.Snapshot{}, &model.Snapshot{}, &model.Snapshot{}
	a, _ := m.get(s1, "k", build)
	b, _ := m.get(s1, "k", build)
	if &a[0] != &b[0] || builds != 1 {
		t.Fatalf("same snapshot and key: %d builds, shared %v", builds, &a[0] == &b[0])
	}
	m.get(s1, "other", build)
	m.get(s2, "k", build)
	if builds != 3 {
		t.Fatalf("another key, another snapshot: %d builds, want 3", builds)
	}
	m.get(s3, "k", build) // s1 is forgotten
	m.get(s2, "k", build)
	if builds != 4 {
		t.Fatalf("the last two snapshots kept: %d builds, want 4", builds)
	}
	m.get(s1, "k", build)
	if builds != 5 || len(m.built) != memoSnapshots {
		t.Fatalf("a forgotten snapshot is built again, %d kept: %d builds", len(m.built), builds)
	}
}
