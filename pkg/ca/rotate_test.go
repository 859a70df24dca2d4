package ca

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// rotationRig is replicas of one CA sharing a state directory, with a
// clock and a data plane the test sets.
type rotationRig struct {
	t     *testing.T
	dir   string
	clock *catest.Clock

	mu      sync.Mutex
	unacked map[string][]string // by replica
}

func newRotationRig(t *testing.T) *rotationRig {
	return &rotationRig{t: t, dir: t.TempDir(), clock: catest.NewClock(time.Now().UTC().Truncate(time.Second)),
		unacked: map[string][]string{}}
}

// replica starts (or restarts) the replica named name.
func (r *rotationRig) replica(name string, change func(*Config)) *CA {
	r.t.Helper()
	c := newTestCA(r.t, func(cfg *Config) {
		cfg.Store = NewDirStore(r.dir)
		cfg.Rotations = NewDirRotationStore(r.dir)
		cfg.Replica = name
		cfg.Clock = r.clock.Now
		cfg.RootGracePercentile = -1
		cfg.DefaultTTL = time.Hour
		cfg.RotationPolicy = RotationPolicy{Grace: 2 * time.Minute, Timeout: time.Hour}
		if change != nil {
			change(cfg)
		}
	})
	mustLoad(r.t, c)
	return c
}

func (r *rotationRig) setUnacked(replica string, proxies ...string) {
	r.mu.Lock()
	r.unacked[replica] = proxies
	r.mu.Unlock()
}

func (r *rotationRig) dataPlane(replica string) DataPlaneFunc {
	return func(context.Context, *x509.Certificate) DataPlane {
		r.mu.Lock()
		defer r.mu.Unlock()
		return DataPlane{Unacked: slices.Clone(r.unacked[replica])}
	}
}

func (r *rotationRig) tick(c *CA, replica string) {
	r.t.Helper()
	if err := c.rot.tick(context.Background(), r.dataPlane(replica)); err != nil {
		r.t.Fatalf("%s: rotate: %v", replica, err)
	}
}

// issue signs a workload certificate and checks its chain as pilot-agent
// reads it: the leaf, then the roots it is to trust as the last element.
func issue(t *testing.T, c *CA) (*Issued, []*x509.Certificate) {
	t.Helper()
	iss, err := c.Sign(SignRequest{PublicKey: catest.NewKey(t).Public(), Identities: []spiffeid.ID{testID("ns", "sa")}})
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	roots, err := parseCerts([]byte(iss.Chain[len(iss.Chain)-1]))
	if err != nil {
		t.Fatal(err)
	}
	return iss, roots
}

func rootsEqual(got []*x509.Certificate, want ...*x509.Certificate) bool {
	return slices.EqualFunc(got, want, func(a, b *x509.Certificate) bool { return a.Equal(b) })
}

// A self-signed root rotates through prepare, activate and retire with
// the signer and the published roots each phase asks for; the set in
// istio-ca-secret's place is never rewritten, and a restart in any phase
// resumes where the rotation stands.
func TestRotationDrivesTheSigner(t *testing.T) {
	rig := newRotationRig(t)
	c := rig.replica("a", nil)
	oldRoot := c.Current().Roots[0]
	secretBefore, err := os.ReadFile(filepath.Join(rig.dir, dirStoreSet, FileCAKey))
	if err != nil {
		t.Fatal(err)
	}
	early, _ := issue(t, c)

	r, err := c.Rotator().Request(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rotator().Request(context.Background()); !errors.Is(err, ErrRotationInProgress) {
		t.Fatalf("second rotation during one: %v", err)
	}
	newRoot := mustParse(r.NewRoot)

	// prepare: both roots published, the old key signs.
	rig.setUnacked("a", "app-1.ns")
	rig.tick(c, "a")
	if !rootsEqual(c.Current().Roots, oldRoot, newRoot) {
		t.Fatalf("prepare: bundle %d roots, want old then new", len(c.Current().Roots))
	}
	iss, roots := issue(t, c)
	if !rootsEqual(roots, oldRoot, newRoot) || iss.Leaf.CheckSignatureFrom(oldRoot) != nil {
		t.Fatal("prepare: the old key must sign, and the chain's last element hold both roots")
	}
	c = rig.replica("a", nil)
	if !rootsEqual(c.Current().Roots, oldRoot, newRoot) {
		t.Fatal("a restart in prepare lost the new root")
	}

	// A proxy without the new bundle holds it past the grace.
	rig.clock.Advance(3 * time.Minute)
	rig.tick(c, "a")
	if st := c.Rotator().Status(); st.Phase != PhasePrepare || !slices.Equal(st.Unacked, []string{"app-1.ns"}) ||
		!strings.Contains(st.Waiting, "app-1.ns") {
		t.Fatalf("status with an unacked proxy: %+v", st)
	}
	rig.setUnacked("a")
	rig.tick(c, "a")
	if st := c.Rotator().Status(); st.Phase != PhaseActivate {
		t.Fatalf("not activated once every proxy held the new root: %+v", st)
	}
	iss, roots = issue(t, c)
	if !rootsEqual(roots, newRoot, oldRoot) || iss.Leaf.CheckSignatureFrom(newRoot) != nil {
		t.Fatal("activate: the new key must sign, with both roots trusted")
	}
	c = rig.replica("a", nil)
	if iss, _ := issue(t, c); iss.Leaf.CheckSignatureFrom(newRoot) != nil {
		t.Fatal("a restart in activate went back to the old key")
	}

	// The old root stays until what the old key signed has expired: the
	// last certificate of prepare outlives the one before the rotation.
	rig.clock.Advance(30 * time.Minute)
	rig.tick(c, "a")
	if len(c.Current().Roots) != 2 {
		t.Fatal("the old root retired while certificates it signed are valid")
	}
	rig.clock.Advance(time.Hour)
	if !rig.clock.Now().After(early.Leaf.NotAfter) {
		t.Fatal("test clock")
	}
	rig.tick(c, "a")
	if !rootsEqual(c.Current().Roots, newRoot) || c.Rotator().Status().Phase != PhaseIdle {
		t.Fatalf("retire: %d roots, phase %q", len(c.Current().Roots), c.Rotator().Status().Phase)
	}
	c = rig.replica("a", nil)
	if iss, roots := issue(t, c); !rootsEqual(roots, newRoot) || iss.Leaf.CheckSignatureFrom(newRoot) != nil {
		t.Fatal("after the rotation a restart must sign with the new key and trust the new root only")
	}
	secretAfter, err := os.ReadFile(filepath.Join(rig.dir, dirStoreSet, FileCAKey))
	if err != nil || !bytes.Equal(secretBefore, secretAfter) {
		t.Fatal("the stored self-signed set was rewritten")
	}

	// A second rotation starts from the set the first one left.
	r2, err := c.Rotator().Request(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r2.OldRoot, newRoot.Raw) || r2.Old == nil {
		t.Fatal("the second rotation does not start from the first one's root")
	}
	rig.tick(c, "a")
	if iss, _ := issue(t, c); iss.Leaf.CheckSignatureFrom(newRoot) != nil {
		t.Fatal("the second rotation's prepare must sign with the first one's key")
	}
}

// With two replicas, one whose proxies lack the new bundle holds
// activation for both; without a Liveness (local mode), a replica that
// stops reporting stops counting.
func TestRotationWaitsForEveryReplica(t *testing.T) {
	rig := newRotationRig(t)
	a := rig.replica("a", nil)
	b := rig.replica("b", nil)
	if _, err := a.Rotator().Request(context.Background()); err != nil {
		t.Fatal(err)
	}
	rig.setUnacked("b", "app-2.ns")
	rig.tick(a, "a")
	rig.tick(b, "b")
	rig.clock.Advance(3 * time.Minute)
	rig.tick(b, "b")
	rig.tick(a, "a")
	if st := a.Rotator().Status(); st.Phase != PhasePrepare || !slices.Equal(st.Unacked, []string{"app-2.ns"}) {
		t.Fatalf("replica a activated while b's proxy lacks the new root: %+v", st)
	}
	if rot, err := a.Rotator().State(context.Background()); err != nil {
		t.Fatal(err)
	} else if _, known, err := a.Rotator().RunningReplicas(context.Background(), rot); known || err != nil {
		t.Errorf("without a Liveness, which replicas run is known (%v, %v)", known, err)
	}
	// b is gone: its report goes stale, and a activates alone.
	rig.clock.Advance(StaleReports*DefaultRotationTick + time.Second)
	rig.tick(a, "a")
	if st := a.Rotator().Status(); st.Phase != PhaseActivate {
		t.Fatalf("a stale replica's report still holds the rotation: %+v", st)
	}
	rig.tick(b, "b")
	if !a.SigningCert().Equal(b.SigningCert()) {
		t.Fatal("the replicas sign with different keys after activation")
	}
}

// The self-signed root starts rotating on its own in the last
// RootGracePercentile of its life.
func TestRotationStartsInTheRootsGracePeriod(t *testing.T) {
	rig := newRotationRig(t)
	pct := func(cfg *Config) { cfg.RootGracePercentile = 20; cfg.RootTTL = 100 * time.Hour }
	c := rig.replica("a", pct)
	rig.clock.Advance(79 * time.Hour)
	rig.tick(c, "a")
	if st := c.Rotator().Status(); st.Phase != PhaseIdle {
		t.Fatalf("rotated with 21%% of the root's life left: %+v", st)
	}
	rig.clock.Advance(2 * time.Hour)
	rig.tick(c, "a")
	if st := c.Rotator().Status(); st.Phase != PhasePrepare || len(st.Roots) != 2 {
		t.Fatalf("no rotation with 19%% of the root's life left: %+v", st)
	}
}

// A plugged-in CA is the operator's: nothing rotates it here.
func TestRotationLeavesAPluggedInCAAlone(t *testing.T) {
	set, _ := pluggedIn(t)
	dir := t.TempDir()
	catest.WriteCACerts(t, dir, set)
	rig := newRotationRig(t)
	c := rig.replica("a", func(cfg *Config) { cfg.CACertsDir = dir; cfg.RootGracePercentile = 99 })
	if _, err := c.Rotator().Request(context.Background()); err == nil || !strings.Contains(err.Error(), "plugged in") {
		t.Fatalf("rotation of a plugged-in CA: %v", err)
	}
	rig.tick(c, "a")
	if r, _ := c.Rotator().State(context.Background()); r != nil {
		t.Fatalf("a plugged-in CA wrote rotation state: %+v", r)
	}
}

// istiod's serving certificate, re-issued by the new key on activation,
// does not keep the old root trusted; a workload certificate does.
func TestRotationCountsWorkloadCertificatesOnly(t *testing.T) {
	rig := newRotationRig(t)
	c := rig.replica("a", nil)
	if _, err := c.Rotator().Request(context.Background()); err != nil {
		t.Fatal(err)
	}
	rig.tick(c, "a")
	if _, err := c.Sign(SignRequest{PublicKey: catest.NewKey(t).Public(), DNSNames: []string{"istiod.istio-system.svc"}, TTL: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	rig.tick(c, "a")
	if r, _ := c.Rotator().State(context.Background()); r.OldSignedUntil.After(rig.clock.Now().Add(time.Hour)) {
		t.Fatalf("a serving certificate holds the old root until %s", r.OldSignedUntil)
	}
	iss, err := c.Sign(SignRequest{PublicKey: catest.NewKey(t).Public(), Identities: []spiffeid.ID{testID("ns", "sa")}, TTL: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rig.tick(c, "a")
	if r, _ := c.Rotator().State(context.Background()); !r.OldSignedUntil.Equal(iss.Leaf.NotAfter) {
		t.Fatalf("old root trusted until %s, want the workload certificate's expiry %s", r.OldSignedUntil, iss.Leaf.NotAfter)
	}
}

// A plugged-in set with a new root rotates in: the signing key keeps
// signing (kept in the rotation state, so a restart keeps it too) while
// both roots are trusted, until the data plane holds the new root. A set
// of yet another root, or a bad set, during the rotation is refused and
// the rotation goes on.
func TestRotationToAPluggedInRoot(t *testing.T) {
	rig := newRotationRig(t)
	dir := t.TempDir()
	set1, root1 := pluggedIn(t)
	catest.WriteCACerts(t, dir, set1)
	withDir := func(cfg *Config) { cfg.CACertsDir = dir }
	c := rig.replica("a", withDir)
	signedBy := func(c *CA, want *catest.Cert) bool {
		iss, _ := issue(t, c)
		return iss.Leaf.CheckSignatureFrom(want.Cert) == nil
	}

	set2, root2 := pluggedIn(t)
	catest.WriteCACerts(t, dir, set2)
	if err := c.reloadLocked(); err != nil {
		t.Fatal(err)
	}
	if st := c.Rotator().Status(); st.Phase != PhasePrepare || !rootsEqual(st.Roots, root1.Cert, root2.Cert) {
		t.Fatalf("a new plugged-in root: phase %q, %d roots; want prepare with both", st.Phase, len(st.Roots))
	}
	if !signedBy(c, set1.Signing) {
		t.Fatal("prepare: the outgoing key must sign")
	}
	c = rig.replica("a", withDir)
	if !signedBy(c, set1.Signing) || !rootsEqual(c.Current().Roots, root1.Cert, root2.Cert) {
		t.Fatal("a restart in prepare must keep the outgoing key, which the cacerts directory no longer holds")
	}

	set3, _ := pluggedIn(t)
	catest.WriteCACerts(t, dir, set3)
	if err := c.reloadLocked(); !errors.Is(err, ErrRotationInProgress) {
		t.Fatalf("another root during the rotation: %v", err)
	}
	catest.WriteFiles(t, dir, map[string][]byte{FileCAKey: []byte("not a key")})
	if err := c.reloadLocked(); err == nil {
		t.Fatal("a bad set during the rotation was accepted")
	}
	if !signedBy(c, set1.Signing) || !rootsEqual(c.Current().Roots, root1.Cert, root2.Cert) {
		t.Fatal("a refused set changed the signer or the bundle")
	}
	catest.WriteCACerts(t, dir, set2)
	if err := c.reloadLocked(); err != nil {
		t.Fatal(err)
	}

	rig.clock.Advance(3 * time.Minute)
	rig.tick(c, "a")
	if st := c.Rotator().Status(); st.Phase != PhaseActivate || !signedBy(c, set2.Signing) || !rootsEqual(st.Roots, root2.Cert, root1.Cert) {
		t.Fatalf("activate: phase %q; want the plugged-in key signing with both roots", st.Phase)
	}
	rig.clock.Advance(2 * time.Hour)
	rig.tick(c, "a")
	if st := c.Rotator().Status(); st.Phase != PhaseIdle || !rootsEqual(st.Roots, root2.Cert) {
		t.Fatalf("retire: phase %q, %d roots", st.Phase, len(st.Roots))
	}
	if r, _ := c.Rotator().State(context.Background()); r.InProgress() || r.Old != nil || r.New != nil {
		t.Fatalf("the finished rotation keeps key material: %+v", r)
	}
	// An intermediate of the same root swaps in at once.
	same := catest.CACerts{Signing: catest.NewIntermediate(t, root2), Roots: []*catest.Cert{root2}}
	catest.WriteCACerts(t, dir, same)
	if err := c.reloadLocked(); err != nil {
		t.Fatal(err)
	}
	if st := c.Rotator().Status(); st.Phase != PhaseIdle || !signedBy(c, same.Signing) {
		t.Fatal("an intermediate of the same root did not swap in at once")
	}
}

// With a Liveness, a replica that stops reporting but runs (cut off from
// the state, still serving its proxies) holds activation with its last
// report, and a running replica that never reported holds it too; once
// they no longer run the rotation moves on. A replica that cannot tell
// which replicas run moves nothing.
func TestRotationWaitsForASilentReplicaThatRuns(t *testing.T) {
	rig := newRotationRig(t)
	var mu sync.Mutex
	running, liveErr := []string{"a", "b", "c"}, error(nil)
	setRunning := func(names []string, err error) {
		mu.Lock()
		running, liveErr = names, err
		mu.Unlock()
	}
	live := func(cfg *Config) {
		cfg.Liveness = LivenessFunc(func(context.Context, []string) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(running), liveErr
		})
	}
	a := rig.replica("a", live)
	b := rig.replica("b", live)
	if _, err := a.Rotator().Request(context.Background()); err != nil {
		t.Fatal(err)
	}
	rig.setUnacked("b", "app-2.ns")
	rig.tick(a, "a")
	rig.tick(b, "b")
	// b reports no more; c runs and never reported.
	rig.clock.Advance(3 * time.Minute)
	rig.tick(a, "a")
	st := a.Rotator().Status()
	if st.Phase != PhasePrepare || !slices.Equal(st.Unacked, []string{"app-2.ns"}) {
		t.Fatalf("activated while the silent replica b runs with a proxy lacking the new root: %+v", st)
	}
	if !strings.Contains(st.Waiting, "running but silent (b)") || !strings.Contains(st.Waiting, "without a report (c)") {
		t.Errorf("waiting for %q; want b named silent and c without a report", st.Waiting)
	}
	rot, err := a.Rotator().State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, known, err := a.Rotator().RunningReplicas(context.Background(), rot); err != nil || !known || !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("running replicas for ca status: %v %v %v", got, known, err)
	}
	setRunning([]string{"a", "b"}, nil)
	rig.tick(a, "a")
	if st := a.Rotator().Status(); st.Phase != PhasePrepare {
		t.Fatalf("activated while the silent replica b runs: %+v", st)
	}
	setRunning(nil, errors.New("the API server is away"))
	if err := a.rot.tick(context.Background(), rig.dataPlane("a")); err == nil || !strings.Contains(err.Error(), "cannot tell which replicas run") {
		t.Errorf("a tick without knowing which replicas run: %v", err)
	}
	// b's pod is gone: its report no longer counts.
	setRunning([]string{"a"}, nil)
	rig.tick(a, "a")
	if st := a.Rotator().Status(); st.Phase != PhaseActivate {
		t.Fatalf("a gone replica's report still holds the rotation: %+v", st)
	}
}

// racingRotations is a RotationStore another writer saves to just before
// the first saves of this one.
type racingRotations struct {
	RotationStore
	races int
	other func()
}

func (s *racingRotations) Save(ctx context.Context, r *Rotation, revision string) (string, error) {
	if s.races > 0 {
		s.races--
		s.other()
	}
	return s.RotationStore.Save(ctx, r, revision)
}

// A replica saving its report between the request's load and save does
// not fail the request: it is made again on what the replica saved.
func TestRotationRequestOutlivesAConcurrentReport(t *testing.T) {
	rig := newRotationRig(t)
	store := NewDirRotationStore(rig.dir)
	other := func() { // a replica records what it signed: no rotation under way
		_, rev, err := store.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Save(context.Background(), &Rotation{OldSignedUntil: rig.clock.Now().Add(time.Hour)}, rev); err != nil {
			t.Fatal(err)
		}
	}
	racing := &racingRotations{RotationStore: store, races: 2, other: other}
	c := rig.replica("a", func(cfg *Config) { cfg.Rotations = racing })
	if _, err := c.Rotator().Request(context.Background()); err != nil {
		t.Fatalf("a request raced twice: %v", err)
	}
	if racing.races != 0 {
		t.Fatal("the store never raced: the test tests nothing")
	}
}
