// Package main builds istiod's container image from a static binary,
// without a container daemon and without pulling a base image: the image
// is one layer holding /istiod on top of nothing.
package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where the binary lives in the image, and who runs it: Istio's proxy
// user, which the chart's securityContext also names.
const (
	binaryPath = "/istiod"
	user       = "1337:1337"
)

// Options say what image to build.
type Options struct {
	// Binary is the static istiod binary (CGO_ENABLED=0).
	Binary string
	// Version is the image's version label and tag.
	Version string
	// Revision is the source revision label (git describe); optional.
	Revision string
	// Source is the repository URL label.
	Source string
	// OS and Arch are the platform the binary was built for.
	OS, Arch string
	// Created is the image's creation time; the zero time keeps builds
	// reproducible (same binary, same digest).
	Created time.Time
}

// Build returns the image: an OCI manifest with one gzip layer.
func Build(opts Options) (v1.Image, error) {
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	layerTar, err := binaryLayer(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = opts.OS, opts.Arch
	cfg.Created = v1.Time{Time: opts.Created}
	cfg.History = []v1.History{{CreatedBy: "hack/image: COPY istiod " + binaryPath, Created: cfg.Created}}
	cfg.Config = v1.Config{
		Entrypoint: []string{binaryPath},
		Cmd:        []string{"discovery"},
		User:       user,
		WorkingDir: "/",
		// istiod runs no other program; PATH is there for tools that expect it.
		Env:    []string{"PATH=/"},
		Labels: labels(opts),
		ExposedPorts: map[string]struct{}{
			"8080/tcp": {}, "15010/tcp": {}, "15012/tcp": {}, "15014/tcp": {}, "15017/tcp": {},
		},
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// labels are the OCI annotation keys, as image labels.
func labels(opts Options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "istiod",
		"org.opencontainers.image.description": "Bulwark istiod: a security-first control plane for Istio's data plane",
		"org.opencontainers.image.version":     opts.Version,
		"org.opencontainers.image.source":      opts.Source,
		"org.opencontainers.image.url":         opts.Source,
		"org.opencontainers.image.vendor":      "Bulwark",
	}
	if opts.Revision != "" {
		l["org.opencontainers.image.revision"] = opts.Revision
	}
	if !opts.Created.IsZero() {
		l["org.opencontainers.image.created"] = opts.Created.UTC().Format(time.RFC3339)
	}
	return l
}

// binaryLayer is an uncompressed tar holding only the binary, owned by
// root and executable by all, with a fixed time so that the layer digest
// depends on the binary alone.
func binaryLayer(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     binaryPath[1:],
		Mode:     0o755,
		Size:     int64(len(bin)),
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("layer header: %w", err)
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, fmt.Errorf("layer content: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer close: %w", err)
	}
	return buf.Bytes(), nil
}
