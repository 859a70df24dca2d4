package ca

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Starting over: istiod ca reset deletes what holds the self-signed CA's
// keys, the set istiod first made and the rotation state (which carries
// every set a rotation made since), so that the next istiod to start
// makes a new root. A running istiod keeps the keys it loaded, so a reset
// is refused while one runs.

// ErrIstiodRunning means a reset was refused because an istiod runs on
// the state it would delete.
var ErrIstiodRunning = errors.New("istiod is running")

// errLocked means another process holds a lock tryLockFile asked for.
var errLocked = errors.New("locked by another process")

// dirRunningLock is the file in the state directory that every istiod
// running on it holds a shared lock on, for as long as it runs.
const dirRunningLock = "istiod.lock"

// HoldDir takes a shared lock on dir's istiod.lock, for an istiod running
// on the state directory dir until it calls release: ResetDir refuses
// while any holds it. It waits while a reset is under way.
func HoldDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hold state dir: %w", err)
	}
	release, err = lockFileShared(filepath.Join(dir, dirRunningLock))
	if err != nil {
		return nil, fmt.Errorf("hold state dir: %w", err)
	}
	return release, nil
}

// ResetDir deletes the CA state in the state directory dir: rotation.json
// (under the flock on rotation.lock every writer of it takes) and then the
// set in istio-ca-secret, removed whole. It refuses, with an error
// wrapping ErrIstiodRunning, while an istiod holds dir (HoldDir), and
// returns the paths it deleted. The cacerts directory, the operator's, is
// left alone, and so are the lock files.
func ResetDir(ctx context.Context, dir string) (deleted []string, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reset %s: %w", dir, err)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	release, err := tryLockFile(filepath.Join(dir, dirRunningLock))
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("reset %s: %w on it: stop it first", dir, ErrIstiodRunning)
	}
	if err != nil {
		return nil, fmt.Errorf("reset %s: %w", dir, err)
	}
	defer release()
	unlock, err := lockFile(filepath.Join(dir, dirRotationLock))
	if err != nil {
		return nil, fmt.Errorf("reset %s: %w", dir, err)
	}
	defer unlock()
	// The rotation state goes first: without it the set in
	// istio-ca-secret signs, which an interrupted reset leaves in place
	// only with the state that made it.
	rotation := filepath.Join(dir, dirRotationFile)
	switch err := os.Remove(rotation); {
	case err == nil:
		deleted = append(deleted, rotation)
	case !errors.Is(err, fs.ErrNotExist):
		return deleted, fmt.Errorf("reset %s: %w", dir, err)
	}
	set := filepath.Join(dir, dirStoreSet)
	gone, err := removeSet(dir, set)
	if err != nil {
		return deleted, fmt.Errorf("reset %s: %w", dir, err)
	}
	if gone {
		deleted = append(deleted, set)
	}
	if err := syncDir(dir); err != nil {
		return deleted, fmt.Errorf("reset %s: %w", dir, err)
	}
	return deleted, nil
}

// removeSet renames the set directory out of the way, which is the
// commit (a reader sees a whole set or none), then deletes it.
func removeSet(dir, set string) (bool, error) {
	tmp, err := os.MkdirTemp(dir, ".reset-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Rename(set, filepath.Join(tmp, dirStoreSet)); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}
