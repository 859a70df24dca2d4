//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package ca

import (
	"fmt"
	"runtime"
)

// lockFile refuses where flock is not available: a rotation state written
// without the lock could lose a concurrent writer's update.
func lockFile(path string) (unlock func(), err error) { return noLock(path) }

// lockFileShared refuses, as lockFile does.
func lockFileShared(path string) (unlock func(), err error) { return noLock(path) }

// tryLockFile refuses, as lockFile does.
func tryLockFile(path string) (unlock func(), err error) { return noLock(path) }

func noLock(path string) (func(), error) {
	return nil, fmt.Errorf("lock %s: file locks are not supported on %s", path, runtime.GOOS)
}
