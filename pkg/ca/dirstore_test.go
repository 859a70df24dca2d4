package ca

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func testMaterial(t *testing.T) *KeyMaterial {
	t.Helper()
	cfg := Config{TrustDomain: testTD, Store: NewDirStore(""), Backdate: 1}
	cfg.setDefaults()
	m, err := newSelfSignedMaterial(&cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDirStoreLoadOfAnEmptyStoreIsNotFound(t *testing.T) {
	for name, dir := range map[string]string{
		"a directory that does not exist": filepath.Join(t.TempDir(), "a", "b"),
		"an empty directory":              t.TempDir(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewDirStore(dir).Load(context.Background())
			wantErrIs(t, err, ErrNotFound)
		})
	}
}

func TestDirStoreCreateWritesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "ca")
	s := NewDirStore(dir)
	m := testMaterial(t)
	got, err := s.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CAKey, m.CAKey) {
		t.Error("Create did not return the stored material")
	}
	for _, d := range []string{dir, filepath.Join(dir, dirStoreSet)} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, %v; want 0700", d, modeOf(st), err)
		}
	}
	for _, f := range m.files() {
		p := filepath.Join(dir, dirStoreSet, f.name)
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", p, modeOf(st), err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("store directory holds %d entries; want only the set (no temporary files)", len(entries))
	}
	loaded, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loaded.CACert, m.CACert) || !bytes.Equal(loaded.CAKey, m.CAKey) ||
		!bytes.Equal(loaded.RootCert, m.RootCert) || !bytes.Equal(loaded.CertChain, m.CertChain) {
		t.Error("Load returned other material than Create stored")
	}
}

func TestDirStoreCreateKeepsTheFirstSet(t *testing.T) {
	s := NewDirStore(t.TempDir())
	first, second := testMaterial(t), testMaterial(t)
	if _, err := s.Create(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	got, err := s.Create(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CACert, first.CACert) {
		t.Error("a second Create replaced the first set")
	}
}

func TestDirStoreConcurrentCreatorsAgreeOnOneWinner(t *testing.T) {
	s := NewDirStore(filepath.Join(t.TempDir(), "ca"))
	const n = 8
	mats := make([]*KeyMaterial, n)
	for i := range mats {
		mats[i] = testMaterial(t)
	}
	results := make([]*KeyMaterial, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = NewDirStore(s.dir).Create(context.Background(), mats[i])
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("creator %d: %v", i, errs[i])
		}
		if !bytes.Equal(results[i].CACert, results[0].CACert) || !bytes.Equal(results[i].CAKey, results[0].CAKey) {
			t.Errorf("creator %d sees another set than creator 0", i)
		}
		if bytes.Equal(mats[i].CACert, results[0].CACert) {
			winners++
		}
	}
	if winners != 1 {
		t.Errorf("%d creators' sets won; want 1", winners)
	}
	stored, err := s.Load(context.Background())
	if err != nil || !bytes.Equal(stored.CACert, results[0].CACert) {
		t.Errorf("stored set is not the one every creator saw (err %v)", err)
	}
}

func TestDirStoreHonoursCancelledContexts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := NewDirStore(t.TempDir())
	if _, err := s.Load(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Load = %v; want context.Canceled", err)
	}
	if _, err := s.Create(ctx, testMaterial(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("Create = %v; want context.Canceled", err)
	}
}

func modeOf(st os.FileInfo) any {
	if st == nil {
		return nil
	}
	return st.Mode()
}
