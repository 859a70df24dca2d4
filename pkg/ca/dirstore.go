package ca

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// dirStoreSet is the subdirectory of a DirStore that holds the set.
const dirStoreSet = "istio-ca-secret"

// DirStore is a Store in a local directory, for running without Kubernetes.
// The set lives in the subdirectory istio-ca-secret, one file per key of
// Istio's Secret. The directory is created 0700 and the files 0600.
//
// Create writes the set into a fresh temporary subdirectory, syncs it, and
// renames it into place. The rename is the commit: a crash leaves either no
// set or a whole one, and of two concurrent creators exactly one rename
// succeeds while the other reads the winner's set.
type DirStore struct {
	dir string
}

var _ Store = (*DirStore)(nil)

// NewDirStore returns a store in dir. It does no I/O.
func NewDirStore(dir string) *DirStore { return &DirStore{dir: dir} }

func (s *DirStore) setDir() string { return filepath.Join(s.dir, dirStoreSet) }

// String names where the set is kept.
func (s *DirStore) String() string { return "directory " + s.setDir() }

// Load reads the stored set, or returns an error wrapping ErrNotFound.
func (s *DirStore) Load(ctx context.Context) (*KeyMaterial, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load store: %w", err)
	}
	dir := s.setDir()
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load store %s: %w", s.dir, ErrNotFound)
	}
	var m KeyMaterial
	for _, f := range m.files() {
		b, err := readBounded(filepath.Join(dir, f.name))
		if err != nil {
			return nil, fmt.Errorf("load store %s: %w", s.dir, fileErr(f.name, err))
		}
		*f.data = b
	}
	return &m, nil
}

// Create stores m unless a set exists, in which case it returns that set.
func (s *DirStore) Create(ctx context.Context, m *KeyMaterial) (*KeyMaterial, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	tmp, err := os.MkdirTemp(s.dir, ".tmp-")
	if err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op once renamed into place
	for _, f := range m.files() {
		if err := writeFileSync(filepath.Join(tmp, f.name), *f.data); err != nil {
			return nil, fmt.Errorf("create store: %w", err)
		}
	}
	if err := syncDir(tmp); err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	if err := os.Rename(tmp, s.setDir()); err != nil {
		if errors.Is(err, fs.ErrExist) { // EEXIST or ENOTEMPTY: another creator won
			return s.Load(ctx)
		}
		return nil, fmt.Errorf("create store: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	out := *m
	return &out, nil
}

type materialFile struct {
	name string
	data *[]byte
}

func (m *KeyMaterial) files() []materialFile {
	return []materialFile{
		{FileCACert, &m.CACert}, {FileCAKey, &m.CAKey},
		{FileCertChain, &m.CertChain}, {FileRootCert, &m.RootCert},
	}
}

// writeFileSync creates path with mode 0600, writes data and syncs it.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}
