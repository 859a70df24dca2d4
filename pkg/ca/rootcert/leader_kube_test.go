package rootcert_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
)

func TestOnlyTheLeaderWritesAndAFollowerTakesOver(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	a, aWrites, stopA := m.controller("istiod-a")
	waitFor(t, "a to lead", a.IsLeader)
	b, bWrites, _ := m.controller("istiod-b")
	waitFor(t, "b's caches", b.HasSynced)

	for range 3 {
		ns, created := m.namespace()
		m.waitConfigMap(ns, created)
	}
	if b.IsLeader() {
		t.Fatal("both controllers lead")
	}
	if n := bWrites.count(); n != 0 {
		t.Errorf("the follower sent %d configmap writes; want none", n)
	}
	if aWrites.count() < 3 {
		t.Errorf("the leader sent %d configmap writes; want at least one per namespace", aWrites.count())
	}

	stopA()
	aAfter := aWrites.count()
	takeover := waitFor(t, "b to lead", b.IsLeader)
	t.Logf("leader cancelled → follower leads after %v", takeover.Round(time.Millisecond))
	ns, created := m.namespace()
	t.Logf("new namespace under the new leader → configmap after %v", m.waitConfigMap(ns, created).Round(time.Millisecond))
	if bWrites.in(ns) == 0 {
		t.Error("the new leader did not write the new namespace's configmap")
	}
	if n := aWrites.count() - aAfter; n != 0 {
		t.Errorf("the stopped leader sent %d writes after Run returned", n)
	}
}

func TestALeaderThatLosesTheLeaseStopsAndCampaignsAgain(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	c, w, _ := m.controller("istiod-a")
	waitFor(t, "a to lead", c.IsLeader)
	leases := m.client.CoordinationV1().Leases(m.leaseNS)

	// Another holder takes the Lease over, as after a partition. The leader
	// renews meanwhile, so a conflict means: read again and retry.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(context.Background(), rootcert.LeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		thief, long := "thief", int32(3600)
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &thief, &long
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		_, err = leases.Update(context.Background(), lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lease taken → old leader stops after %v", waitFor(t, "a to stop leading", func() bool { return !c.IsLeader() }).Round(time.Millisecond))
	stopped := w.count()
	ns, _ := m.namespace()
	time.Sleep(time.Second)
	if n := w.count() - stopped; n != 0 {
		t.Errorf("the deposed leader sent %d configmap writes", n)
	}

	// The other holder goes away; a campaigns again and catches up.
	if err := leases.Delete(context.Background(), rootcert.LeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to lead again", c.IsLeader)
	m.waitConfigMap(ns, time.Now())
}
