package meshconfig

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

var testDefaults = Defaults{TrustDomain: "cluster.local", RootNamespace: "istio-system"}

const (
	registryOnly = meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY
	allowAny     = meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY
)

// with returns the defaults changed by edit.
func with(edit func(mc *meshv1alpha1.MeshConfig)) *meshv1alpha1.MeshConfig {
	mc := Default(testDefaults)
	edit(mc)
	return mc
}

func TestParseReadsIstiosDocumentedExamples(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want *meshv1alpha1.MeshConfig
	}{
		"an empty document is the defaults": {
			yaml: "",
			want: Default(testDefaults),
		},
		"a comment-only document is the defaults": {
			yaml: "# nothing here\n",
			want: Default(testDefaults),
		},
		"registry-only egress, as Istio's egress task sets it": {
			yaml: "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n",
			want: with(func(mc *meshv1alpha1.MeshConfig) {
				mc.OutboundTrafficPolicy = &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: registryOnly}
			}),
		},
		"an outbound traffic policy without a mode is REGISTRY_ONLY, the enum's zero, as in Istio": {
			yaml: "outboundTrafficPolicy: {}\n",
			want: with(func(mc *meshv1alpha1.MeshConfig) {
				mc.OutboundTrafficPolicy = &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: registryOnly}
			}),
		},
		"auto mTLS turned off": {
			yaml: "enableAutoMtls: false\n",
			want: with(func(mc *meshv1alpha1.MeshConfig) { mc.EnableAutoMtls = wrapperspb.Bool(false) }),
		},
		"a trust domain migration: the new domain and the old one as an alias": {
			yaml: "trustDomain: new-td\ntrustDomainAliases:\n  - old-td\n  - cluster.local\n  - old-td\n",
			want: with(func(mc *meshv1alpha1.MeshConfig) {
				mc.TrustDomain = "new-td"
				mc.TrustDomainAliases = []string{"cluster.local", "old-td"}
			}),
		},
		"the chart's mesh: root namespace, trust domain and discovery address": {
			yaml: "enablePrometheusMerge: true\nrootNamespace: mesh-root\ntrustDomain: cluster.local\n" +
				"defaultConfig:\n  discoveryAddress: istiod.mesh-root.svc:15012\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"true\"\n",
			want: with(func(mc *meshv1alpha1.MeshConfig) {
				mc.RootNamespace = "mesh-root"
				mc.DefaultConfig = &meshv1alpha1.ProxyConfig{
					DiscoveryAddress: "istiod.mesh-root.svc:15012",
					ProxyMetadata:    map[string]string{"ISTIO_META_DNS_CAPTURE": "true"},
				}
			}),
		},
		"fields Bulwark does not read are kept": {
			yaml: "accessLogFile: /dev/stdout\nenableTracing: true\n",
			want: with(func(mc *meshv1alpha1.MeshConfig) {
				mc.AccessLogFile = "/dev/stdout"
				mc.EnableTracing = true
			}),
		},
		"snake_case field names are read like camelCase": {
			yaml: "root_namespace: other\nenable_auto_mtls: false\n",
			want: with(func(mc *meshv1alpha1.MeshConfig) {
				mc.RootNamespace = "other"
				mc.EnableAutoMtls = wrapperspb.Bool(false)
			}),
		},
		"a null field keeps its default": {
			yaml: "trustDomain: null\noutboundTrafficPolicy: null\n",
			want: Default(testDefaults),
		},
		"JSON is YAML too": {
			yaml: `{"outboundTrafficPolicy":{"mode":"REGISTRY_ONLY"},"enableAutoMtls":true}`,
			want: with(func(mc *meshv1alpha1.MeshConfig) {
				mc.OutboundTrafficPolicy = &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: registryOnly}
			}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, warnings, err := Parse([]byte(tc.yaml), testDefaults)
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings %q, want none", warnings)
			}
			if !proto.Equal(got, tc.want) {
				t.Errorf("got  %s\nwant %s", protojson.Format(got), protojson.Format(tc.want))
			}
		})
	}
}

func TestParseIgnoresUnknownFieldsAndSaysSo(t *testing.T) {
	got, warnings, err := Parse([]byte("someFutureField: {a: 1}\noutboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n  egressProxy2: x\n"), testDefaults)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetOutboundTrafficPolicy().GetMode() != registryOnly {
		t.Errorf("mode %v, want REGISTRY_ONLY: the known fields beside unknown ones must be read", got.GetOutboundTrafficPolicy().GetMode())
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "someFutureField") || !strings.Contains(warnings[0], "outboundTrafficPolicy.egressProxy2") {
		t.Errorf("warnings %q, want one naming someFutureField and outboundTrafficPolicy.egressProxy2", warnings)
	}
}

func TestParseAppliesTheDefaultsGiven(t *testing.T) {
	got, _, err := Parse([]byte("enableAutoMtls: true\n"), Defaults{TrustDomain: "example.org", RootNamespace: "bulwark"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetTrustDomain() != "example.org" || got.GetRootNamespace() != "bulwark" {
		t.Errorf("trust domain %q, root namespace %q: want the defaults given", got.GetTrustDomain(), got.GetRootNamespace())
	}
	if d := Default(Defaults{}); d.GetTrustDomain() != "cluster.local" || d.GetRootNamespace() != "istio-system" {
		t.Errorf("empty defaults give %q and %q, want Istio's cluster.local and istio-system", d.GetTrustDomain(), d.GetRootNamespace())
	}
}

func TestParseRejectsBadDocumentsWithAClearReason(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want string
	}{
		"text that is not YAML":                 {yaml: "outboundTrafficPolicy: [\n", want: "not YAML"},
		"a list instead of a mapping":           {yaml: "- trustDomain: a\n", want: "must be a mapping"},
		"a scalar instead of a mapping":         {yaml: "REGISTRY_ONLY\n", want: "must be a mapping"},
		"a field of the wrong type":             {yaml: "enableAutoMtls: [1]\n", want: "enableAutoMtls"},
		"an unknown traffic mode":               {yaml: "outboundTrafficPolicy: {mode: 7}\n", want: "outboundTrafficPolicy.mode 7"},
		"an unknown traffic mode name":          {yaml: "outboundTrafficPolicy: {mode: SOMETIMES}\n", want: "SOMETIMES"},
		"an empty trust domain":                 {yaml: "trustDomain: \"\"\n", want: "trustDomain: empty"},
		"a trust domain with capitals":          {yaml: "trustDomain: Cluster.Local\n", want: "not a SPIFFE trust domain"},
		"a trust domain that is a SPIFFE ID":    {yaml: "trustDomain: spiffe://cluster.local\n", want: "trustDomain"},
		"a trust domain with an underscore":     {yaml: "trustDomain: my_domain.local\n", want: "label \"my_domain\""},
		"a trust domain with a slash":           {yaml: "trustDomain: a/b\n", want: "trustDomain"},
		"a trust domain with an empty label":    {yaml: "trustDomain: a..b\n", want: "trustDomain"},
		"an invalid alias":                      {yaml: "trustDomainAliases: [good.td, \"bad td\"]\n", want: "trustDomainAliases[0]"},
		"a wildcard alias":                      {yaml: "trustDomainAliases: [\"*.td\"]\n", want: "trustDomainAliases[0]"},
		"a root namespace that is no namespace": {yaml: "rootNamespace: Istio_System\n", want: "rootNamespace"},
		"a discovery address without a port":    {yaml: "defaultConfig: {discoveryAddress: istiod.istio-system.svc}\n", want: "discoveryAddress"},
		"a discovery address with port 0":       {yaml: "defaultConfig: {discoveryAddress: \"istiod:0\"}\n", want: "port \"0\""},
		"a discovery address with a bad host":   {yaml: "defaultConfig: {discoveryAddress: \"is tiod:15012\"}\n", want: "host"},
		"an access log format over the bound": {
			yaml: "accessLogFormat: \"" + strings.Repeat("x", MaxAccessLogFormat+1) + "\"\n", want: "accessLogFormat",
		},
		"too many aliases": {
			yaml: "trustDomainAliases: [" + strings.Repeat("a.b,", MaxTrustDomainAliases) + "x.y]\n",
			want: "", // repeated aliases collapse: only distinct ones count
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.yaml), testDefaults)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParseBoundsTheDocument(t *testing.T) {
	var many strings.Builder
	many.WriteString("trustDomainAliases:\n")
	for i := 0; i <= MaxTrustDomainAliases; i++ {
		many.WriteString("- td" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".example\n")
	}
	if _, _, err := Parse([]byte(many.String()), testDefaults); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("%d distinct aliases: err = %v, want the limit", MaxTrustDomainAliases+1, err)
	}
	big := "accessLogFile: /dev/stdout\n# " + strings.Repeat("x", MaxBytes) + "\n"
	if _, _, err := Parse([]byte(big), testDefaults); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("a document over %d bytes: err = %v, want the limit", MaxBytes, err)
	}
}

func TestUnmarshalJSONStrictRefusesUnknownFields(t *testing.T) {
	if _, _, err := UnmarshalJSON([]byte(`{"nope":true}`), true); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("strict: err = %v, want one naming the field", err)
	}
	if strings.Contains(ProtoError{errString("a\u00a0b")}.Error(), "\u00a0") {
		t.Error("ProtoError keeps a non-breaking space")
	}
}

type errString string

func (e errString) Error() string { return string(e) }
