//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package ca

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path, created 0600 if absent,
// waiting for any other holder, in this process or another. The returned
// func releases it. The file is never removed: a process waiting on the
// old file would otherwise hold a lock no one else sees.
func lockFile(path string) (unlock func(), err error) {
	return flockFile(path, syscall.LOCK_EX)
}

// lockFileShared is lockFile for a shared lock: any number of holders,
// none while an exclusive one is held.
func lockFileShared(path string) (unlock func(), err error) {
	return flockFile(path, syscall.LOCK_SH)
}

// tryLockFile is lockFile without waiting: an error wrapping errLocked
// when another holds a lock on path, shared or exclusive.
func tryLockFile(path string) (unlock func(), err error) {
	return flockFile(path, syscall.LOCK_EX|syscall.LOCK_NB)
}

func flockFile(path string, how int) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	var lockErr error
	if err := conn.Control(func(fd uintptr) {
		for {
			lockErr = syscall.Flock(int(fd), how)
			if !errors.Is(lockErr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		lockErr = err
	}
	if errors.Is(lockErr, syscall.EWOULDBLOCK) {
		lockErr = errLocked
	}
	if lockErr != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, lockErr)
	}
	return func() { f.Close() }, nil // closing the only descriptor releases the lock
}
