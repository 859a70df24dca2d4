package ca_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rotationtest"
)

func TestDirRotationStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	rotationtest.StoreContract(t, ca.NewDirRotationStore(dir))

	// What another hand wrote there is refused, not trusted.
	if err := os.WriteFile(filepath.Join(dir, "rotation.json"), []byte(`{"phase":"activate"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.NewDirRotationStore(dir).Load(context.Background()); err == nil {
		t.Error("a malformed rotation.json was loaded")
	}
}

// countSaves moves the stored rotation n times by reading it and saving it
// with its Watermark a second later, again on a conflict; at its
// activateAt-th save (never when negative) it also moves the phase to
// activate. It fails when it reads the phase moved back.
func countSaves(ctx context.Context, s ca.RotationStore, n, activateAt int) (int, error) {
	active := false
	for saves := 0; saves < n; {
		r, rev, err := s.Load(ctx)
		if err != nil {
			return saves, err
		}
		if r.Phase == ca.PhaseActivate {
			active = true
		} else if active {
			return saves, fmt.Errorf("after %d saves: the phase moved back from activate to %q", saves, r.Phase)
		}
		next := *r
		next.Watermark = r.Watermark.Add(time.Second)
		if saves == activateAt {
			next.Phase, next.Activated = ca.PhaseActivate, r.Prepared
		}
		if _, err := s.Save(ctx, &next, rev); errors.Is(err, ca.ErrRotationConflict) {
			continue
		} else if err != nil {
			return saves, err
		}
		saves++
	}
	return n, nil
}

// Writers of one state directory, goroutines here and another process,
// each reading the rotation and saving it moved by one: every save counts
// (none overwrites another's), and the phase, once activate, stays.
func TestDirRotationStoreWritersLoseNoUpdate(t *testing.T) {
	const writers, saves = 4, 40
	ctx := context.Background()
	dir := t.TempDir()
	s := ca.NewDirRotationStore(dir)
	start := time.Now().UTC().Truncate(time.Second)
	begun, err := ca.Begin(nil, catest.NewRoot(t).Cert, catest.NewRoot(t).Cert, time.Time{}, start)
	if err != nil {
		t.Fatal(err)
	}
	begun.Watermark = start
	if _, err := s.Save(ctx, begun, ""); err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), rotationWriterEnv+"="+dir, rotationWriterSavesEnv+"="+strconv.Itoa(saves))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("the writer process did not start: %q %v", out.Text(), child.Wait())
	}

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			activateAt := -1
			if i == 0 {
				activateAt = saves / 4
			}
			if _, err := countSaves(ctx, s, saves, activateAt); err != nil {
				errs <- fmt.Errorf("writer %d: %w", i, err)
			}
		})
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !out.Scan() {
		t.Fatalf("the writer process: %v", child.Wait())
	}
	childSaves, err := strconv.Atoi(out.Text())
	if err := child.Wait(); err != nil {
		t.Fatalf("the writer process: %v", err)
	}
	if err != nil {
		t.Fatalf("the writer process printed %q", out.Text())
	}

	r, _, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Watermark.Sub(start), time.Duration(writers*saves+childSaves)*time.Second; got != want {
		t.Errorf("the saves moved the state by %s, want %s: %d saves were lost", got, want, (want-got)/time.Second)
	}
	if r.Phase != ca.PhaseActivate {
		t.Errorf("phase %q after the activation, want activate", r.Phase)
	}
}
