package migrate

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// CACertsSecret is the Secret of a plugged-in CA, which Istio's chart and
// Bulwark's both mount at /etc/cacerts.
const CACertsSecret = "cacerts"

// CA is the CA situation in the control plane's namespace.
type CA struct {
	// Present says which of the Secrets cacerts, istio-ca-secret and
	// istio-ca-rotation exist.
	CACerts, IstioCASecret, Rotation bool
	// IstioRoot is the root Istio's istiod signs under, as it chooses:
	// the plugged-in cacerts, else istio-ca-secret; nil when neither.
	IstioRoot *x509.Certificate
	// IstioRootFrom names the Secret IstioRoot comes from.
	IstioRootFrom string
	// Bulwark is where the key Bulwark would sign with is kept, as
	// package ca finds it (the rotation state, then cacerts, then
	// istio-ca-secret); its Cert is nil when Bulwark would make a new
	// root. Nil when that cannot be told (Err).
	Bulwark *ca.SigningKey
	// Err is why Bulwark's signing key cannot be told: a cacerts set or
	// an istio-ca-secret istiod would refuse.
	Err error
}

// SameRoot reports whether both control planes sign under one root.
func (c *CA) SameRoot() bool {
	return c.IstioRoot != nil && c.Bulwark != nil && c.Bulwark.Root != nil && bytes.Equal(c.IstioRoot.Raw, c.Bulwark.Root.Raw)
}

// checkCA reads the CA Secrets of namespace and asks package ca which key
// Bulwark would sign with.
func checkCA(ctx context.Context, client kubernetes.Interface, namespace string, td spiffeid.TrustDomain) (*CA, error) {
	out := &CA{}
	secrets := client.CoreV1().Secrets(namespace)
	get := func(name string) (map[string][]byte, bool, error) {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, false, nil
		case err != nil:
			return nil, false, fmt.Errorf("read secret %s/%s: %w", namespace, name, err)
		}
		return s.Data, true, nil
	}
	cacerts, found, err := get(CACertsSecret)
	if err != nil {
		return nil, err
	}
	out.CACerts = found
	istioSecret, found, err := get(secretstore.SecretName)
	if err != nil {
		return nil, err
	}
	out.IstioCASecret = found
	if _, out.Rotation, err = get(secretstore.RotationSecretName); err != nil {
		return nil, err
	}

	switch {
	case out.CACerts:
		out.IstioRootFrom = "Secret " + namespace + "/" + CACertsSecret
		out.IstioRoot = firstCert(cacerts[ca.FileRootCert], cacerts[ca.FileTLSCA])
	case out.IstioCASecret:
		out.IstioRootFrom = "Secret " + namespace + "/" + secretstore.SecretName
		out.IstioRoot = firstCert(istioSecret[ca.FileRootCert], istioSecret[ca.FileCACert])
	}

	authority, err := ca.New(ca.Config{
		TrustDomain: td,
		Store:       secretstore.New(client.CoreV1(), namespace),
		Rotations:   secretstore.NewRotationStore(client.CoreV1(), namespace),
	})
	if err != nil {
		return nil, err
	}
	key, err := authority.SigningKeyOf(ctx, cacerts, "Secret "+namespace+"/"+CACertsSecret)
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return nil, err // the apiserver failed us: nothing was checked
		}
		out.Err = err
		return out, nil
	}
	out.Bulwark = key
	return out, nil
}

// firstCert parses the first certificate of the first non-empty PEM
// bundle, nil when there is none.
func firstCert(bundles ...[]byte) *x509.Certificate {
	for _, b := range bundles {
		for {
			var block *pem.Block
			block, b = pem.Decode(b)
			if block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			if c, err := x509.ParseCertificate(block.Bytes); err == nil {
				return c
			}
			break
		}
	}
	return nil
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
