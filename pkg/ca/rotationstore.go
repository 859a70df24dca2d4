package ca

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// RotationStore keeps the rotation under way, shared by every replica and
// read again after a restart. Save is a compare-and-swap on the revision
// Load returned, so two replicas never both move one rotation.
type RotationStore interface {
	// Load returns the rotation under way (nil for none) and its revision.
	Load(ctx context.Context) (r *Rotation, revision string, err error)
	// Save replaces the rotation at revision with r (nil: the rotation is
	// done) and returns the new revision, or an error wrapping
	// ErrRotationConflict when another writer moved it first.
	Save(ctx context.Context, r *Rotation, revision string) (string, error)
}

// ErrRotationConflict is returned by Save when the stored rotation is no
// longer at the revision given.
var ErrRotationConflict = errors.New("the stored rotation changed meanwhile")

// dirRotationFile is the DirRotationStore's file in the state directory,
// and dirRotationLock the file its writers lock.
const (
	dirRotationFile = "rotation.json"
	dirRotationLock = "rotation.lock"
)

// DirRotationStore is a RotationStore in a local directory: the file
// rotation.json, written to a temporary file, synced and renamed into
// place, so a crash leaves the old state or the new one. Its revision is
// the hash of the file.
//
// Save holds an exclusive flock on rotation.lock, beside the state, from
// reading the revision to renaming the new state into place, so that the
// compare-and-swap is one step for every writer: istiod's replicas sharing
// the directory, and istiod mint-cert or istiod ca rotate run beside them.
// Readers take no lock: the rename shows them a whole file either way.
type DirRotationStore struct {
	dir string
}

var _ RotationStore = (*DirRotationStore)(nil)

// NewDirRotationStore returns a store in dir. It does no I/O.
func NewDirRotationStore(dir string) *DirRotationStore { return &DirRotationStore{dir: dir} }

func (s *DirRotationStore) path() string { return filepath.Join(s.dir, dirRotationFile) }

// String names where the rotation state is kept.
func (s *DirRotationStore) String() string { return "file " + s.path() }

// Load reads rotation.json; none means no rotation under way.
func (s *DirRotationStore) Load(ctx context.Context) (*Rotation, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	b, err := readBounded(s.path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("load rotation %s: %w", s.path(), err)
	}
	r, err := UnmarshalRotation(b)
	if err != nil {
		return nil, "", fmt.Errorf("load rotation %s: %w", s.path(), err)
	}
	return r, revisionOf(b), nil
}

// Save writes r if rotation.json is still at revision ("" for absent).
func (s *DirRotationStore) Save(ctx context.Context, r *Rotation, revision string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var b []byte
	if r != nil {
		var err error
		if b, err = MarshalRotation(r); err != nil {
			return "", fmt.Errorf("save rotation: %w", err)
		}
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return "", fmt.Errorf("save rotation: %w", err)
	}
	unlock, err := lockFile(filepath.Join(s.dir, dirRotationLock))
	if err != nil {
		return "", fmt.Errorf("save rotation: %w", err)
	}
	defer unlock()
	_, cur, err := s.Load(ctx)
	if err != nil {
		return "", err
	}
	if cur != revision {
		return "", fmt.Errorf("save rotation %s: %w", s.path(), ErrRotationConflict)
	}
	if r == nil {
		if err := os.Remove(s.path()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("save rotation: %w", err)
		}
		return "", syncDir(s.dir)
	}
	if err := s.replace(b); err != nil {
		return "", fmt.Errorf("save rotation: %w", err)
	}
	return revisionOf(b), nil
}

// replace writes b to a temporary file, syncs it and renames it over
// rotation.json.
func (s *DirRotationStore) replace(b []byte) error {
	tmp, err := os.CreateTemp(s.dir, ".rotation-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op once renamed into place
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.path()); err != nil {
		return err
	}
	return syncDir(s.dir)
}

func revisionOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}
