package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Usage, from the repository root (`make image` does this):
//
//	CGO_ENABLED=0 go build -trimpath -o bin/istiod ./cmd/istiod
//	cd hack/image && go run . -binary ../../bin/istiod -chart ../../charts/istiod/Chart.yaml \
//	    -out ../../bin/istiod-image.tar -revision "$(git describe --tags --always --dirty)"
func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fl.String("binary", "bin/istiod", "static istiod binary (CGO_ENABLED=0)")
	out := fl.String("out", "bin/istiod-image.tar", "image archive to write (OCI layout in a tar)")
	repository := fl.String("repository", "ghcr.io/bulwark-mesh/istiod", "image repository; the chart's image.repository")
	chartFile := fl.String("chart", "charts/istiod/Chart.yaml", "Chart.yaml whose appVersion is the default tag")
	tag := fl.String("tag", "", "image tag and version label; empty: the chart's appVersion, the tag the chart pulls by default")
	revision := fl.String("revision", "", "source revision label, e.g. git describe output")
	osName := fl.String("os", "linux", "platform OS the binary was built for")
	arch := fl.String("arch", runtime.GOARCH, "platform architecture the binary was built for")
	epoch := fl.Int64("created", 0, "image creation time in Unix seconds (the Makefile passes SOURCE_DATE_EPOCH); 0 leaves it unset, so one binary always gives one digest")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *tag == "" {
		v, err := appVersion(*chartFile)
		if err != nil {
			return err
		}
		*tag = v
	}
	var created time.Time
	if *epoch > 0 {
		created = time.Unix(*epoch, 0).UTC()
	}
	img, err := Build(Options{
		Binary:   *binary,
		Version:  *tag,
		Revision: *revision,
		Source:   "https://github.com/bulwark-mesh/bulwark",
		OS:       *osName,
		Arch:     *arch,
		Created:  created,
	})
	if err != nil {
		return err
	}
	if err := WriteArchive(*out, img, *repository, *tag); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	fmt.Printf("%s: %s:%s@%s\n", *out, *repository, *tag, digest)
	return nil
}

// appVersion reads the appVersion line of a Chart.yaml. The file is flat
// YAML written by us, so a line scan is enough and keeps this module free
// of a YAML library.
func appVersion(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read chart: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if ok && key == "appVersion" {
			v := strings.Trim(strings.TrimSpace(val), `"'`)
			if v == "" {
				break
			}
			return v, nil
		}
	}
	return "", errors.New("no appVersion in " + path)
}
