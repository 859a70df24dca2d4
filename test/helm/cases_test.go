package helm

import (
	"path/filepath"
	"testing"
)

// renderCase is one `helm template` the chart is checked with. Its golden
// file is testdata/golden/<name>.yaml.
type renderCase struct {
	opts Options
}

// renderCases are the installs the chart must support.
var renderCases = map[string]renderCase{
	"default": {},
	"canary": {opts: Options{
		ValuesFiles: []string{valuesFile("canary")},
	}},
	"ha": {opts: Options{
		ValuesFiles: []string{valuesFile("ha")},
		APIVersions: []string{"monitoring.coreos.com/v1"},
	}},
	"plugged-ca": {opts: Options{
		ValuesFiles: []string{valuesFile("plugged-ca")},
	}},
	"webhook-url": {opts: Options{
		ValuesFiles: []string{valuesFile("webhook-url")},
	}},
	"other-namespace": {opts: Options{
		Namespace: "mesh-system",
	}},
}

func valuesFile(name string) string {
	return filepath.Join("testdata", "values", name+".yaml")
}

// mustRender renders a case or stops the test.
func mustRender(t *testing.T, opts Options) *Rendered {
	t.Helper()
	r, err := Render(opts)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}
