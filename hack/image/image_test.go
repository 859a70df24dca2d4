package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

const testRepository = "ghcr.io/bulwark-mesh/istiod"

// dummyBinary stands in for istiod: the image does not care what it runs.
func dummyBinary(t *testing.T) (string, []byte) {
	t.Helper()
	content := []byte("\x7fELF not really istiod\n")
	path := filepath.Join(t.TempDir(), "istiod")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content
}

func build(t *testing.T) (v1.Image, []byte) {
	t.Helper()
	bin, content := dummyBinary(t)
	img, err := Build(Options{Binary: bin, Version: "1.2.3", Revision: "v1.2.3-4-gabcdef", Source: "https://example.com/src", OS: "linux", Arch: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	return img, content
}

func TestImageRunsIstiodAsNonRoot(t *testing.T) {
	img, _ := build(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/istiod"}) || !slices.Equal(c.Cmd, []string{"discovery"}) {
		t.Errorf("entrypoint %q cmd %q, want [/istiod] [discovery]", c.Entrypoint, c.Cmd)
	}
	if c.User != "1337:1337" {
		t.Errorf("user %q, want 1337:1337 (non-root, the chart's runAsUser)", c.User)
	}
	if c.WorkingDir != "/" {
		t.Errorf("working dir %q", c.WorkingDir)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("platform %s/%s, want linux/arm64", cf.OS, cf.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "1.2.3",
		"org.opencontainers.image.revision": "v1.2.3-4-gabcdef",
		"org.opencontainers.image.source":   "https://example.com/src",
		"org.opencontainers.image.title":    "istiod",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s (%v), want OCI", mt, err)
	}
}

func TestImageHoldsOnlyTheBinary(t *testing.T) {
	img, content := build(t)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var entries []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, hdr.Name)
		if hdr.Name != "istiod" {
			continue
		}
		if hdr.Typeflag != tar.TypeReg || hdr.FileInfo().Mode().Perm() != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("istiod: type %c mode %v owner %d:%d, want a 0755 file owned by root",
				hdr.Typeflag, hdr.FileInfo().Mode().Perm(), hdr.Uid, hdr.Gid)
		}
		got, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Error("istiod in the layer differs from the binary")
		}
	}
	if !slices.Equal(entries, []string{"istiod"}) {
		t.Errorf("layer holds %q, want only istiod", entries)
	}
}

func TestSameBinarySameDigest(t *testing.T) {
	a, _ := build(t)
	b, _ := build(t)
	da, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if da != db {
		t.Errorf("two builds of one binary: %s and %s", da, db)
	}
}

// The archive is read back as an OCI layout (skopeo oci-archive:, crane
// push of the unpacked directory, docker load) and through its Docker
// manifest.json (crane push of the file, older docker load).
func TestArchiveLoadsAsOCILayoutAndDockerArchive(t *testing.T) {
	img, _ := build(t)
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bin", "istiod-image.tar")
	if err := WriteArchive(out, img, testRepository, "1.2.3"); err != nil {
		t.Fatal(err)
	}

	dir := untar(t, out)
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.Digest != want {
		t.Errorf("index.json points at %s, want %s", d.Digest, want)
	}
	if d.Annotations[refNameAnnotation] != "1.2.3" || d.Annotations[fullNameAnnotation] != testRepository+":1.2.3" {
		t.Errorf("index.json annotations %v", d.Annotations)
	}
	fromLayout, err := lp.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(fromLayout); err != nil {
		t.Errorf("image read from the layout does not validate: %v", err)
	}

	tag, err := name.NewTag(testRepository + ":1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	fromDocker, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("read as a docker archive: %v", err)
	}
	if err := validate.Image(fromDocker); err != nil {
		t.Errorf("image read from manifest.json does not validate: %v", err)
	}
	wantCfg, _ := img.ConfigName()
	if got, err := fromDocker.ConfigName(); err != nil || got != wantCfg {
		t.Errorf("docker archive config %s (%v), want %s", got, err, wantCfg)
	}
}

func TestAppVersionIsTheDefaultTag(t *testing.T) {
	v, err := appVersion("../../charts/istiod/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if v == "" {
		t.Fatal("empty appVersion")
	}
	path := filepath.Join(t.TempDir(), "Chart.yaml")
	if err := os.WriteFile(path, []byte("name: x\nversion: 0.1.0\nappVersion: \"9.8.7\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := appVersion(path); err != nil || v != "9.8.7" {
		t.Errorf("appVersion = %q, %v; want 9.8.7", v, err)
	}
}

func untar(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
