package ca

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// restarted is r after a round trip through its store, as a restarted
// replica reads it.
func restarted(t *testing.T, r *Rotation) *Rotation {
	t.Helper()
	if r == nil {
		return nil
	}
	b, err := MarshalRotation(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalRotation(b)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	return got
}

// A rotation goes prepare → activate → done, each step only when the data
// plane holds what it needs, and a restart in any phase resumes it.
func TestRotationPhases(t *testing.T) {
	t0 := time.Now().UTC().Truncate(time.Second)
	oldRoot, newRoot := catest.NewRoot(t), catest.NewRoot(t)
	policy := RotationPolicy{Grace: 2 * time.Minute, Timeout: time.Hour}

	for _, restart := range []bool{false, true} {
		step := func(r *Rotation, now time.Time, dp DataPlane) (*Rotation, string) {
			if restart {
				r = restarted(t, r)
			}
			return r.Step(now, dp, policy)
		}
		r, err := Begin(nil, oldRoot.Cert, newRoot.Cert, t0.Add(24*time.Hour), t0)
		if err != nil {
			t.Fatal(err)
		}
		if signing, other := r.Roots(); !bytes.Equal(signing, oldRoot.Cert.Raw) || !bytes.Equal(other, newRoot.Cert.Raw) || r.NewKeySigns() {
			t.Fatal("prepare: the old key must sign and both roots be trusted")
		}
		// The old key signs a longer-lived certificate during prepare.
		r.Signed(t0.Add(30 * time.Hour))

		waiting := DataPlane{Unacked: []string{"app-1.ns"}, Missing: []string{"ns"}}
		if next, why := step(r, t0.Add(10*time.Minute), waiting); next.Phase != PhasePrepare ||
			!strings.Contains(why, "app-1.ns") || !strings.Contains(why, "1 namespaces") {
			t.Fatalf("activated with the data plane behind: %v %q", next.Phase, why)
		}
		if next, why := step(r, t0.Add(time.Minute), DataPlane{}); next.Phase != PhasePrepare || !strings.Contains(why, "grace") {
			t.Fatalf("activated within the grace: %v %q", next.Phase, why)
		}
		r, _ = step(r, t0.Add(3*time.Minute), DataPlane{})
		if r.Phase != PhaseActivate || !r.NewKeySigns() || !r.Activated.Equal(t0.Add(3*time.Minute)) || len(r.Forced) != 0 {
			t.Fatalf("not activated once the data plane held the new bundle: %+v", r)
		}
		if signing, other := r.Roots(); !bytes.Equal(signing, newRoot.Cert.Raw) || !bytes.Equal(other, oldRoot.Cert.Raw) {
			t.Fatal("activate: the new key must sign and the old root stay trusted")
		}
		r.Signed(t0.Add(100 * time.Hour)) // the new key's certificates do not keep the old root
		if next, why := step(r, t0.Add(29*time.Hour), DataPlane{}); next == nil || !strings.Contains(why, "old key") {
			t.Fatalf("the old root retired while certificates it signed are valid: %v %q", next, why)
		}
		if next, _ := step(r, t0.Add(30*time.Hour), DataPlane{}); next.InProgress() || next.OldRoot != nil ||
			!bytes.Equal(next.NewRoot, newRoot.Cert.Raw) {
			t.Fatalf("the old root outlived the last certificate it signed: %+v", next)
		}
	}
}

// A proxy that never ACKs holds the rotation in prepare until the timeout;
// then activation goes ahead only when the policy says so, naming it.
func TestRotationTimeout(t *testing.T) {
	t0 := time.Now().UTC().Truncate(time.Second)
	r, err := Begin(nil, catest.NewRoot(t).Cert, catest.NewRoot(t).Cert, t0, t0)
	if err != nil {
		t.Fatal(err)
	}
	stuck := DataPlane{Unacked: []string{"stuck.ns"}}
	stay := RotationPolicy{Timeout: time.Hour}
	if next, why := r.Step(t0.Add(2*time.Hour), stuck, stay); next.Phase != PhasePrepare || !strings.Contains(why, "stuck.ns") {
		t.Errorf("default policy past the timeout: %v %q, want prepare naming stuck.ns", next.Phase, why)
	}
	proceed := RotationPolicy{Timeout: time.Hour, ProceedAfterTimeout: true}
	if next, _ := r.Step(t0.Add(30*time.Minute), stuck, proceed); next.Phase != PhasePrepare {
		t.Errorf("activated before the timeout")
	}
	next, _ := r.Step(t0.Add(time.Hour), stuck, proceed)
	if next.Phase != PhaseActivate || len(next.Forced) != 1 || next.Forced[0] != "stuck.ns" {
		t.Errorf("proceeding past the timeout: %+v", next)
	}
	// A namespace without the new root is never forced: istiod writes it.
	if next, _ := r.Step(t0.Add(2*time.Hour), DataPlane{Missing: []string{"ns"}}, proceed); next.Phase != PhasePrepare {
		t.Errorf("forced with a namespace lacking the new root")
	}
}

func TestRotationRefusals(t *testing.T) {
	t0 := time.Now()
	oldRoot, newRoot := catest.NewRoot(t), catest.NewRoot(t)
	r, err := Begin(nil, oldRoot.Cert, newRoot.Cert, t0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Begin(r, oldRoot.Cert, catest.NewRoot(t).Cert, t0, t0); !errors.Is(err, ErrRotationInProgress) {
		t.Errorf("a second rotation during one: %v", err)
	}
	if _, err := Begin(nil, oldRoot.Cert, oldRoot.Cert, t0, t0); err == nil {
		t.Error("rotated to the current root")
	}
	intermediate := catest.NewIntermediate(t, oldRoot)
	if _, err := Begin(nil, oldRoot.Cert, intermediate.Cert, t0, t0); err == nil {
		t.Error("rotated to a certificate that is not self-signed")
	}
	expired := catest.NewRoot(t, catest.WithValidity(t0.Add(-2*time.Hour), t0.Add(-time.Hour)))
	if _, err := Begin(nil, oldRoot.Cert, expired.Cert, t0, t0); err == nil {
		t.Error("rotated to an expired root")
	}
}

// A persisted rotation is read strictly: what another replica or an
// operator wrote into the store cannot make istiod trust or sign with
// anything but two parsed roots in a known phase.
func TestUnmarshalRotationRefusesBadState(t *testing.T) {
	t0 := time.Now()
	r, err := Begin(nil, catest.NewRoot(t).Cert, catest.NewRoot(t).Cert, t0, t0)
	if err != nil {
		t.Fatal(err)
	}
	good, err := MarshalRotation(r)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"unknown phase": bytes.Replace(good, []byte(`"prepare"`), []byte(`"retire-now"`), 1),
		"idle phase":    bytes.Replace(good, []byte(`"prepare"`), []byte(`""`), 1),
		"unknown field": bytes.Replace(good, []byte(`{`), []byte(`{"extra":1,`), 1),
		"bad root":      bytes.Replace(good, []byte(`"newRoot":"`), []byte(`"newRoot":"AAAA`), 1),
		"no times":      bytes.Replace(good, []byte(`"prepared":"`), []byte(`"x":"`), 1),
		"too large":     append(bytes.Repeat([]byte(" "), maxRotationBytes), good...),
		"not JSON":      []byte("phase: prepare"),
		"activated early": []byte(strings.Replace(strings.Replace(string(good), `"prepare"`, `"activate"`, 1),
			`"prepared":"`, `"activated":"2000-01-01T00:00:00Z","prepared":"`, 1)),
	} {
		if _, err := UnmarshalRotation(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzUnmarshalRotation(f *testing.F) {
	t0 := time.Now().UTC().Truncate(time.Second)
	root := catest.NewRoot(f)
	r, err := Begin(nil, catest.NewRoot(f).Cert, root.Cert, t0, t0)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := MarshalRotation(r)
	f.Add(good)
	f.Add([]byte(`{"phase":"activate"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := UnmarshalRotation(b)
		if err != nil {
			return
		}
		// Whatever is accepted re-encodes to a state that is accepted again.
		again, err := MarshalRotation(got)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := UnmarshalRotation(again); err != nil {
			t.Fatalf("accepted state does not survive a round trip: %v", err)
		}
		_, _ = got.Step(t0, DataPlane{}, RotationPolicy{})
	})
}

// The reports that count are the recent ones and the last ones of the
// replicas that still run; a running replica without a report holds the
// rotation in prepare, as what its proxies hold is not known.
func TestRotationCountsTheReportsOfReplicasThatRun(t *testing.T) {
	t0 := time.Now().UTC().Truncate(time.Second)
	since := t0.Add(-time.Minute)
	r, err := Begin(nil, catest.NewRoot(t).Cert, catest.NewRoot(t).Cert, t0, t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r.Replicas = map[string]ReplicaReport{
		"fresh":  {At: t0, Unacked: []string{"a.ns"}},
		"silent": {At: since.Add(-time.Second), Unacked: []string{"b.ns"}, Missing: []string{"ns"}},
		"gone":   {At: since.Add(-time.Hour), Unacked: []string{"c.ns"}},
	}
	for name, tc := range map[string]struct {
		running []string
		want    DataPlane
	}{
		"replicas that stopped reporting are gone without a liveness signal": {
			want: DataPlane{Unacked: []string{"a.ns"}},
		},
		"a silent replica that runs keeps its last report": {
			running: []string{"fresh", "silent"},
			want:    DataPlane{Unacked: []string{"a.ns", "b.ns"}, Missing: []string{"ns"}, Silent: []string{"silent"}},
		},
		"a running replica without a report is unreported": {
			running: []string{"fresh", "new"},
			want:    DataPlane{Unacked: []string{"a.ns"}, Unreported: []string{"new"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := r.Counted(since, tc.running)
			if !slices.Equal(got.Unacked, tc.want.Unacked) || !slices.Equal(got.Missing, tc.want.Missing) ||
				!slices.Equal(got.Silent, tc.want.Silent) || !slices.Equal(got.Unreported, tc.want.Unreported) {
				t.Errorf("Counted = %+v, want %+v", got, tc.want)
			}
		})
	}

	policy := RotationPolicy{Grace: time.Minute, Timeout: time.Hour}
	next, why := r.Step(t0, DataPlane{Unreported: []string{"new"}}, policy)
	if next.Phase != PhasePrepare || !strings.Contains(why, "new") || !strings.Contains(why, "without a report") {
		t.Errorf("activated with a running replica that never reported: %v %q", next.Phase, why)
	}
	next, why = r.Step(t0, DataPlane{Unacked: []string{"b.ns"}, Silent: []string{"silent"}}, policy)
	if next.Phase != PhasePrepare || !strings.Contains(why, "b.ns") || !strings.Contains(why, "silent") {
		t.Errorf("a silent replica's proxy: %v %q", next.Phase, why)
	}
	// Past the timeout, proceeding records the replica it went ahead without.
	proceed := RotationPolicy{Timeout: time.Hour, ProceedAfterTimeout: true}
	next, _ = r.Step(t0.Add(time.Hour), DataPlane{Unreported: []string{"new"}}, proceed)
	if next.Phase != PhaseActivate || !slices.Equal(next.Forced, []string{"replica new (unreported)"}) {
		t.Errorf("proceeding past the timeout without a replica's report: %+v", next)
	}
}
