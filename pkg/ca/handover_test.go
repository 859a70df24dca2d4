package ca

import (
	"context"
	"crypto/x509"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Goroutines sign without pause while a rotation activates: every
// certificate the old key signed, before, during or after the activation
// tick, expires by the OldSignedUntil saved with the activation, so no
// peer meets one after the old root has left its bundle. Each signature
// asks for a longer life than the one before, so a certificate the record
// missed outlives it. Run with -race; each round is one activation.
func TestActivationRecordsEveryCertificateTheOldKeySigned(t *testing.T) {
	const rounds, signers = 20, 4
	key := catest.NewKey(t)
	id := []spiffeid.ID{testID("ns", "sa")}
	for round := range rounds {
		rig := newRotationRig(t)
		c := rig.replica("a", nil)
		oldRoot := c.Current().Roots[0]
		if _, err := c.Rotator().Request(context.Background()); err != nil {
			t.Fatal(err)
		}
		rig.tick(c, "a")
		rig.clock.Advance(3 * time.Minute) // past the grace: the next tick activates

		var ttl atomic.Int64
		ttl.Store(int64(time.Hour / time.Second))
		stop := make(chan struct{})
		started := make(chan struct{}, signers)
		leaves := make([][]*x509.Certificate, signers)
		var wg sync.WaitGroup
		for g := range signers {
			wg.Go(func() {
				for n := 0; ; n++ {
					if n == 1 {
						started <- struct{}{}
					}
					select {
					case <-stop:
						return
					default:
					}
					iss, err := c.Sign(SignRequest{PublicKey: key.Public(), Identities: id, TTL: time.Duration(ttl.Add(1)) * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					leaves[g] = append(leaves[g], iss.Leaf)
				}
			})
		}
		for range signers {
			<-started
		}
		rig.tick(c, "a")
		close(stop)
		wg.Wait()

		r, err := c.Rotator().State(context.Background())
		if err != nil || r.Phase != PhaseActivate {
			t.Fatalf("round %d: the tick did not activate: %+v %v", round, r, err)
		}
		for _, l := range leaves {
			for _, leaf := range l {
				if leaf.CheckSignatureFrom(oldRoot) == nil && leaf.NotAfter.After(r.OldSignedUntil) {
					t.Fatalf("round %d: the old key signed a certificate valid until %s; the old root is trusted until %s",
						round, leaf.NotAfter, r.OldSignedUntil)
				}
			}
		}
	}
}

// withCreate makes c's current signer sign through create.
func withCreate(c *CA, create func(rand io.Reader, tmpl, parent *x509.Certificate, pub, priv any) ([]byte, error)) {
	a := *c.auth.Load()
	a.create = create
	c.auth.Store(&a)
}

// A Sign already signing with the key in force when another signer takes
// its place is recorded in the state saved with that change: the root it
// signed under stays trusted until its certificate expires.
func TestASignInFlightWhenTheSignerChangesIsRecorded(t *testing.T) {
	tests := map[string]struct {
		// start makes a CA and returns it with the change of its signer.
		start func(t *testing.T, rig *rotationRig) (*CA, func())
		// until is what in the saved state keeps the root trusted.
		until func(r *Rotation) time.Time
	}{
		"the new key activates": {
			start: func(t *testing.T, rig *rotationRig) (*CA, func()) {
				c := rig.replica("a", nil)
				if _, err := c.Rotator().Request(context.Background()); err != nil {
					t.Fatal(err)
				}
				rig.tick(c, "a")
				rig.clock.Advance(3 * time.Minute)
				return c, func() {
					rig.tick(c, "a")
					if st := c.Rotator().Status(); st.Phase != PhaseActivate {
						t.Errorf("not activated: %+v", st)
					}
				}
			},
			until: func(r *Rotation) time.Time { return r.OldSignedUntil },
		},
		"a plugged-in set of another root rotates in": {
			start: func(t *testing.T, rig *rotationRig) (*CA, func()) {
				dir := t.TempDir()
				set, _ := pluggedIn(t)
				catest.WriteCACerts(t, dir, set)
				c := rig.replica("a", func(cfg *Config) { cfg.CACertsDir = dir })
				return c, func() {
					next, _ := pluggedIn(t)
					catest.WriteCACerts(t, dir, next)
					if err := c.reloadLocked(); err != nil {
						t.Error(err)
					}
				}
			},
			until: func(r *Rotation) time.Time { return r.OldSignedUntil },
		},
		"an intermediate of the same root swaps in": {
			start: func(t *testing.T, rig *rotationRig) (*CA, func()) {
				dir := t.TempDir()
				set, root := pluggedIn(t)
				catest.WriteCACerts(t, dir, set)
				c := rig.replica("a", func(cfg *Config) { cfg.CACertsDir = dir })
				return c, func() {
					catest.WriteCACerts(t, dir, catest.CACerts{Signing: catest.NewIntermediate(t, root), Roots: []*catest.Cert{root}})
					if err := c.reloadLocked(); err != nil {
						t.Error(err)
					}
				}
			},
			until: func(r *Rotation) time.Time { return r.Watermark },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rig := newRotationRig(t)
			c, change := tc.start(t, rig)
			entered, release := make(chan struct{}), make(chan struct{})
			withCreate(c, func(r io.Reader, tmpl, parent *x509.Certificate, pub, priv any) ([]byte, error) {
				close(entered)
				<-release
				return x509.CreateCertificate(r, tmpl, parent, pub, priv)
			})
			done := make(chan *Issued, 1)
			go func() {
				iss, err := c.Sign(SignRequest{PublicKey: catest.NewKey(t).Public(), Identities: []spiffeid.ID{testID("ns", "sa")}, TTL: 48 * time.Hour})
				if err != nil {
					t.Error(err)
				}
				done <- iss
			}()
			<-entered
			change()
			close(release)
			iss := <-done
			if iss == nil {
				return
			}
			r, err := c.Rotator().State(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if r == nil {
				r = &Rotation{}
			}
			if until := tc.until(r); iss.Leaf.NotAfter.After(until) {
				t.Fatalf("a certificate signed during the change is valid until %s; the state keeps its root trusted until %s", iss.Leaf.NotAfter, until)
			}
		})
	}
}
