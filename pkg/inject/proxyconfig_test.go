package inject

import "testing"

// The agent asks for the trust bundle over xDS (PCDS) by default; the
// mesh's defaultConfig or the pod's proxy.istio.io/config can turn it off.
func TestProxyConfigXDSAgentIsOnByDefault(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		annos  map[string]string
		want   string
	}{
		"default":                 {want: "true"},
		"off in the mesh":         {values: `{"meshConfig":{"defaultConfig":{"proxyMetadata":{"PROXY_CONFIG_XDS_AGENT":"false"}}}}`, want: "false"},
		"off for the pod":         {annos: map[string]string{AnnotationProxyConfig: `{"proxyMetadata":{"PROXY_CONFIG_XDS_AGENT":"false"}}`}, want: "false"},
		"other metadata kept too": {values: `{"meshConfig":{"defaultConfig":{"proxyMetadata":{"ISTIO_META_DNS_CAPTURE":"true"}}}}`, want: "true"},
	} {
		t.Run(name, func(t *testing.T) {
			_, v, err := ParseConfig(nil, []byte(tc.values))
			if err != nil {
				t.Fatal(err)
			}
			ps, err := resolveProxyConfig(tc.annos, v)
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, e := range ps.metadata {
				env[e.name] = e.value
			}
			if env[EnvProxyConfigXDSAgent] != tc.want {
				t.Errorf("%s = %q, want %q (metadata %v)", EnvProxyConfigXDSAgent, env[EnvProxyConfigXDSAgent], tc.want, env)
			}
			if name == "other metadata kept too" && env["ISTIO_META_DNS_CAPTURE"] != "true" {
				t.Errorf("the mesh's proxyMetadata was lost: %v", env)
			}
		})
	}
}
