package meshconfig

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

func TestNotHonouredNamesTheFieldsIstiodIgnores(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"an empty document", "", nil},
		{"the chart's document", "enablePrometheusMerge: true\nrootNamespace: istio-system\ntrustDomain: cluster.local\ndefaultConfig: {discoveryAddress: istiod.istio-system.svc:15012}\n", nil},
		{"Istio's ingress controller settings", "ingressClass: istio\ningressControllerMode: DEFAULT\ningressService: istio-ingressgateway\n",
			[]string{"ingressClass", "ingressControllerMode", "ingressService"}},
		{"locality and tracing", "localityLbSetting: {enabled: true}\nenableTracing: true\n", []string{"enableTracing", "localityLbSetting"}},
		{"a field at its zero value asks for nothing", "enableTracing: false\ningressClass: \"\"\n", nil},
		{"DNS proxying asked of every proxy", "defaultConfig: {proxyMetadata: {ISTIO_META_DNS_CAPTURE: \"true\", ISTIO_META_DNS_AUTO_ALLOCATE: \"true\"}}\n",
			[]string{"defaultConfig.proxyMetadata.ISTIO_META_DNS_CAPTURE"}},
		{"DNS proxying off", "defaultConfig: {proxyMetadata: {ISTIO_META_DNS_CAPTURE: \"false\"}}\n", nil},
		{"tracing among the default providers", "defaultProviders: {metrics: [prometheus], tracing: [zipkin]}\n", []string{"defaultProviders.tracing"}},
		{"every honoured field", "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\nenableAutoMtls: false\nh2UpgradePolicy: UPGRADE\ntrustDomainAliases: [old.td]\n" +
			"defaultServiceExportTo: [.]\ndefaultDestinationRuleExportTo: [.]\ndefaultVirtualServiceExportTo: [.]\ndefaultHttpRetryPolicy: {attempts: 1}\n" +
			"tlsDefaults: {ecdhCurves: [P-256]}\naccessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: \"%START_TIME%\\n\"\n" +
			"extensionProviders: [{name: prom, prometheus: {}}]\ndefaultProviders: {accessLogging: [envoy]}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc, _, err := Parse([]byte(tc.doc), testDefaults)
			if err != nil {
				t.Fatal(err)
			}
			if got := NotHonoured(mc); !slices.Equal(got, tc.want) {
				t.Errorf("NotHonoured = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHonouredFieldsAreTheREADMEsTable holds the list of fields istiod acts
// on to the README's mesh configuration table, and each to a field of
// MeshConfig, so that neither says more than the other.
func TestHonouredFieldsAreTheREADMEsTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	start := strings.Index(section, "\n### Mesh configuration\n")
	if start < 0 {
		t.Fatal("README has no Mesh configuration section")
	}
	section = section[start+1:]
	if end := strings.Index(section[4:], "\n#"); end >= 0 {
		section = section[:end+4]
	}
	var table []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		// A row may document one part of a field (outboundTrafficPolicy.mode,
		// defaultProviders.metrics): the field is the name before the dot.
		for _, m := range regexp.MustCompile("`([A-Za-z0-9]+)[A-Za-z0-9.]*`").FindAllStringSubmatch(first, -1) {
			table = append(table, m[1])
		}
	}
	slices.Sort(table)
	table = slices.Compact(table)
	var code []string
	for name := range honoured {
		if (&meshv1alpha1.MeshConfig{}).ProtoReflect().Descriptor().Fields().ByJSONName(name) == nil {
			t.Errorf("%q is not a MeshConfig field", name)
		}
		code = append(code, name)
	}
	slices.Sort(code)
	if !slices.Equal(table, code) {
		t.Errorf("README's mesh configuration table names %q,\nthe fields istiod acts on are %q", table, code)
	}
}

func TestWatcherSaysWhichFieldsHaveNoEffect(t *testing.T) {
	d := newConfigMapDir(t, "ingressClass: istio\nlocalityLbSetting: {enabled: true}\n")
	w, updates, rec := startWatcher(t, WatcherConfig{Path: d.path()})
	next(t, updates)
	if rec.Count("WARN", "does not act on", "ingressClass", "localityLbSetting") != 1 {
		t.Error("the fields with no effect were not logged")
	}
	const want = `
# HELP bulwark_mesh_config_ignored_field 1 for each field the mesh configuration in force sets and istiod does not act on.
# TYPE bulwark_mesh_config_ignored_field gauge
bulwark_mesh_config_ignored_field{field="ingressClass"} 1
bulwark_mesh_config_ignored_field{field="localityLbSetting"} 1
`
	if err := testutil.CollectAndCompare(w.Collector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	d.update("rootNamespace: mesh-root\n")
	next(t, updates)
	if n := testutil.CollectAndCount(w.Collector()); n != 0 {
		t.Errorf("%d series after the fields went, want none", n)
	}
}
