package ca

import "errors"

// Sentinel errors. Functions wrap them with details; match with errors.Is.
var (
	// ErrNotFound means a Store holds no key material yet.
	ErrNotFound = errors.New("not found")
	// ErrNotReady means no signer has been loaded yet.
	ErrNotReady = errors.New("ca not ready")
	// ErrInvalidCSR means a certificate request, or the public key in a
	// sign request, breaks the signing policy.
	ErrInvalidCSR = errors.New("invalid certificate request")
	// ErrIdentityNotAllowed means a request names an identity the caller
	// may not have.
	ErrIdentityNotAllowed = errors.New("identity not allowed")
	// ErrInvalidTTL means a requested lifetime is above the maximum.
	ErrInvalidTTL = errors.New("invalid ttl")
	// ErrSignerExpired means the signing certificate is expired or not yet
	// valid at the current time.
	ErrSignerExpired = errors.New("signing certificate expired or not yet valid")
)

// FileError names the file of a CA set that is wrong and says why. Loading
// a plugged-in CA directory or a Store returns one, wrapped.
type FileError struct {
	File string // base name, e.g. "ca-key.pem"
	Err  error
}

func (e *FileError) Error() string { return e.File + ": " + e.Err.Error() }

func (e *FileError) Unwrap() error { return e.Err }

func fileErr(file string, err error) error { return &FileError{File: file, Err: err} }
