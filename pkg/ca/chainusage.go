package ca

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
)

// leafExtKeyUsages are the extended key usages of every leaf Sign issues:
// a workload is both the server and the client of mutual TLS.
var leafExtKeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// certFiles names the file of a set each certificate was read from, by its
// DER; a certificate in more than one file is named by the first added.
type certFiles map[string]string

func (o certFiles) add(file string, certs ...*x509.Certificate) {
	for _, c := range certs {
		if _, ok := o[string(c.Raw)]; !ok {
			o[string(c.Raw)] = file
		}
	}
}

// pathForLeaves is the first of chains (each from the signing certificate
// to a root) whose every certificate allows the usages leaves carry, or the
// error checkPathUsages gives for the first chain.
func pathForLeaves(chains [][]*x509.Certificate, files certFiles) ([]*x509.Certificate, error) {
	for _, path := range chains {
		if checkPathUsages(path, files) == nil {
			return path, nil
		}
	}
	return nil, checkPathUsages(chains[0], files)
}

// checkPathUsages requires every certificate of path that carries an
// extended key usage extension to list each usage leaves carry. A
// certificate without the extension allows every usage. Go's verifier also
// takes anyExtendedKeyUsage for every usage, BoringSSL (Envoy's) does not:
// there a CA certificate's extension must list serverAuth to verify a
// server and clientAuth to verify a client, so every leaf below one that
// lacks them is refused by Envoy.
func checkPathUsages(path []*x509.Certificate, files certFiles) error {
	for _, c := range path {
		if len(c.ExtKeyUsage)+len(c.UnknownExtKeyUsage) == 0 {
			continue
		}
		for _, u := range leafExtKeyUsages {
			if !slices.Contains(c.ExtKeyUsage, u) {
				return fileErr(files[string(c.Raw)], fmt.Errorf(
					"certificate %q limits extended key usage to %s, without %s: Envoy would refuse every workload certificate below it "+
						"(list serverAuth and clientAuth, or leave the extension out)",
					c.Subject, extKeyUsageNames(c), u))
			}
		}
	}
	return nil
}

// extKeyUsageNames lists c's extended key usages for a message.
func extKeyUsageNames(c *x509.Certificate) string {
	var names []string
	for _, u := range c.ExtKeyUsage {
		names = append(names, u.String())
	}
	for _, oid := range c.UnknownExtKeyUsage {
		names = append(names, oid.String())
	}
	return strings.Join(names, ", ")
}
