package ca

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
)

// loadPluggedIn reads and checks the CA set in dir. found is false when dir
// holds none of the set's files (or does not exist): there is no plugged-in
// CA. Errors start with "cacerts: " and name the file at fault.
func loadPluggedIn(dir string, now time.Time) (a *authority, found bool, err error) {
	set, found, err := readCACerts(dir)
	if err != nil || !found {
		return nil, found, err
	}
	a, err = newAuthority(set, now, sourcePluggedIn)
	if err != nil {
		return nil, true, fmt.Errorf("cacerts: %w", err)
	}
	return a, true, nil
}

// readCACerts reads a complete set in Istio's layout, or else in the TLS
// layout. Files of neither layout in dir means no set; some but not all files
// of a layout is an error.
func readCACerts(dir string) (rawSet, bool, error) {
	names := []string{FileCACert, FileCAKey, FileCertChain, FileRootCert, FileTLSCert, FileTLSKey, FileTLSCA}
	data := make(map[string][]byte, len(names))
	for _, name := range names {
		b, err := readBounded(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return rawSet{}, false, fmt.Errorf("cacerts: %w", fileErr(name, err))
		}
		data[name] = b
	}
	return pickSet(data)
}

// pickSet is the set the files in data (by file name) make: Istio's
// layout, else the TLS layout; none of either's files is no set, and a
// partial layout is an error.
func pickSet(data map[string][]byte) (rawSet, bool, error) {
	istio := []string{FileCACert, FileCAKey, FileCertChain, FileRootCert}
	tls := []string{FileTLSCert, FileTLSKey, FileTLSCA}
	switch {
	case len(data) == 0:
		return rawSet{}, false, nil
	case len(missing(data, istio)) == 0:
		return rawSet{files: istioFiles, cert: data[FileCACert], key: data[FileCAKey],
			chain: data[FileCertChain], roots: data[FileRootCert]}, true, nil
	case len(missing(data, tls)) == 0:
		return rawSet{files: tlsFiles, cert: data[FileTLSCert], key: data[FileTLSKey],
			roots: data[FileTLSCA]}, true, nil
	}
	want := istio
	if len(missing(data, istio)) == len(istio) {
		want = tls
	}
	gone := missing(data, want)
	var have []string
	for _, n := range want {
		if _, ok := data[n]; ok {
			have = append(have, n)
		}
	}
	return rawSet{}, true, fmt.Errorf("cacerts: %w", fileErr(gone[0],
		fmt.Errorf("missing from a partial set (have %s; also missing: %s)",
			strings.Join(have, ", "), strings.Join(gone, ", "))))
}

func missing(data map[string][]byte, names []string) []string {
	var out []string
	for _, n := range names {
		if _, ok := data[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}
