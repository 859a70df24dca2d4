package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations naming the image in the layout's index.json: the OCI one
// holds the tag (skopeo's oci-archive:<file>:<tag>), the containerd one the
// full reference (docker load, ctr import).
const (
	refNameAnnotation    = "org.opencontainers.image.ref.name"
	fullNameAnnotation   = "io.containerd.image.name"
	dockerManifestName   = "manifest.json"
	archiveEntryModeFile = 0o644
	archiveEntryModeDir  = 0o755
)

// dockerManifest is one entry of the manifest.json `docker save` writes.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteArchive writes img, named repository:tag, as a tar file holding an
// OCI image layout. The same tar also carries Docker's manifest.json over
// the same blobs, so that tools reading only `docker save` archives (docker
// load before OCI support, crane push of a file, skopeo docker-archive:)
// accept it too.
func WriteArchive(path string, img v1.Image, repository, tag string) error {
	dir, err := os.MkdirTemp("", "istiod-image-")
	if err != nil {
		return fmt.Errorf("layout directory: %w", err)
	}
	defer os.RemoveAll(dir)

	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	ref := repository + ":" + tag
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		refNameAnnotation:  tag,
		fullNameAnnotation: ref,
	})); err != nil {
		return fmt.Errorf("write image to layout: %w", err)
	}
	dm, err := dockerManifestFor(img, ref)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, dockerManifestName), dm, archiveEntryModeFile); err != nil {
		return fmt.Errorf("write %s: %w", dockerManifestName, err)
	}
	return tarDir(path, dir)
}

func dockerManifestFor(img v1.Image, ref string) ([]byte, error) {
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, fmt.Errorf("config digest: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	m := dockerManifest{Config: blobPath(cfg), RepoTags: []string{ref}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, fmt.Errorf("layer digest: %w", err)
		}
		m.Layers = append(m.Layers, blobPath(d))
	}
	b, err := json.Marshal([]dockerManifest{m})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", dockerManifestName, err)
	}
	return b, nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// tarDir writes the files under dir to a tar at path, sorted, with fixed
// owners and times so that the same image gives the same archive.
func tarDir(path, dir string) (err error) {
	var names []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return fmt.Errorf("list layout: %w", err)
	}
	sort.Strings(names)

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("create archive: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	tw := tar.NewWriter(f)
	for _, name := range names {
		if err := addFile(tw, dir, name); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close archive: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("move archive into place: %w", err)
	}
	return nil
}

func addFile(tw *tar.Writer, dir, name string) error {
	full := filepath.Join(dir, filepath.FromSlash(name))
	st, err := os.Stat(full)
	if err != nil {
		return fmt.Errorf("stat %s: %w", name, err)
	}
	hdr := &tar.Header{Name: name, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if st.IsDir() {
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", archiveEntryModeDir
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("archive %s: %w", name, err)
		}
		return nil
	}
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, archiveEntryModeFile, st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	src, err := os.Open(full)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer src.Close()
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	return nil
}
