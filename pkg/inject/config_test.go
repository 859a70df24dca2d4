package inject

import (
	"strings"
	"sync"
	"testing"
)

func TestParseConfigDefaults(t *testing.T) {
	cfg, v, err := ParseConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != PolicyEnabled || len(cfg.DefaultTemplates) != 1 || cfg.DefaultTemplates[0] != TemplateSidecar {
		t.Errorf("config = %+v", cfg)
	}
	if got := v.ProxyImage(); got != "docker.io/istio/proxyv2:1.28.0" {
		t.Errorf("proxy image = %s", got)
	}
	if got := v.CAAddress(); got != "istiod.istio-system.svc:15012" {
		t.Errorf("CA address = %s", got)
	}
	if !v.SidecarInjectorWebhook.RewriteAppHTTPProbe || !v.PrometheusMerge() {
		t.Errorf("rewrite/prometheus defaults off")
	}
	c, vals := DefaultConfigFiles()
	if len(c) == 0 || len(vals) == 0 {
		t.Error("embedded files are empty")
	}
}

func TestParseConfigOverlaysValues(t *testing.T) {
	_, v, err := ParseConfig(nil, []byte(`{"revision":"1-28","global":{"tag":1.28,"caAddress":"ca.example.com:15012","proxy":{"image":"registry.example.com/mesh/proxyv2:dev"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.ProxyImage(); got != "registry.example.com/mesh/proxyv2:dev" {
		t.Errorf("proxy image = %s", got)
	}
	if got := v.InitImage(); got != "docker.io/istio/proxyv2:1.28" {
		t.Errorf("init image = %s", got)
	}
	if got := v.DiscoveryAddress(); got != "istiod-1-28.istio-system.svc:15012" {
		t.Errorf("discovery = %s", got)
	}
	if got := v.CAAddress(); got != "ca.example.com:15012" {
		t.Errorf("CA = %s", got)
	}
	if v.Global.Proxy.LogLevel != "warning" {
		t.Errorf("unset values lost their defaults: %q", v.Global.Proxy.LogLevel)
	}
}

func TestParseConfigRejects(t *testing.T) {
	cases := map[string]struct {
		config, values, want string
	}{
		"an unknown config key":                   {config: "policy: enabled\nfoo: bar\n", want: "foo"},
		"a policy other than enabled or disabled": {config: "policy: sometimes\n", want: "policy"},
		"a template that is not built in":         {config: "policy: enabled\ntemplates:\n  spire: x\n", want: "spire"},
		"a default template that is not built in": {config: "policy: enabled\ndefaultTemplates: [spire]\n", want: "spire"},
		"an alias to an unknown template":         {config: "policy: enabled\naliases:\n  x: [spire]\n", want: "spire"},
		"a malformed selector":                    {config: "policy: enabled\nneverInjectSelector:\n- matchExpressions:\n  - {key: a, operator: Bogus}\n", want: "neverInjectSelector"},
		"a bad injected annotation key":           {config: "policy: enabled\ninjectedAnnotations:\n  'bad key': x\n", want: "injectedAnnotations"},
		"an unknown values key":                   {values: `{"global":{"nope":1}}`, want: "nope"},
		"values that are not JSON":                {values: `global: {}`, want: "values"},
		"trailing data after the values":          {values: `{} {}`, want: "trailing"},
		"a privileged proxy":                      {values: `{"global":{"proxy":{"privileged":true}}}`, want: "privileged"},
		"namespaces injected by default":          {values: `{"sidecarInjectorWebhook":{"enableNamespacesByDefault":true}}`, want: "enableNamespacesByDefault"},
		"a status port out of range":              {values: `{"global":{"proxy":{"statusPort":70000}}}`, want: "statusPort"},
		"a bad hub":                               {values: `{"global":{"hub":"Not A Hub"}}`, want: "hub"},
		"a bad include range":                     {values: `{"global":{"proxy":{"includeIPRanges":"nope"}}}`, want: "includeIPRanges"},
		"a resource request above its limit":      {values: `{"global":{"proxy":{"resources":{"requests":{"cpu":"4"}}}}}`, want: "resources"},
		"an unknown meshConfig field":             {values: `{"meshConfig":{"nope":true}}`, want: "meshConfig"},
		"a TPROXY mesh default":                   {values: `{"meshConfig":{"defaultConfig":{"interceptionMode":"TPROXY"}}}`, want: "TPROXY"},
		"a bad namespace":                         {values: `{"global":{"istioNamespace":"Istio System"}}`, want: "istioNamespace"},
		"a tag that is an object":                 {values: `{"global":{"tag":{}}}`, want: "tag"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := ParseConfig([]byte(tc.config), []byte(tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestStoreKeepsTheLastGoodConfig(t *testing.T) {
	s := NewStore()
	if err := s.Update([]byte("policy: disabled\n"), []byte(`{"revision":"blue"}`)); err != nil {
		t.Fatal(err)
	}
	good := s.Load()
	if good.Config.Policy != PolicyDisabled || good.Values.Revision != "blue" {
		t.Fatalf("update not applied: %+v", good.Config)
	}
	if err := s.Update([]byte("policy: bogus\n"), nil); err == nil {
		t.Fatal("bad update accepted")
	}
	if s.Load() != good {
		t.Error("bad update replaced the last good snapshot")
	}
}

func TestStoreSwapsAtomicallyUnderLoad(t *testing.T) {
	s := NewStore()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap := s.Load()
				// A snapshot is consistent: revision blue always comes with policy disabled.
				if snap.Values.Revision == "blue" && snap.Config.Policy != PolicyDisabled {
					t.Error("torn snapshot")
					return
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if i%2 == 0 {
			_ = s.Update([]byte("policy: disabled\n"), []byte(`{"revision":"blue"}`))
		} else {
			_ = s.Update(nil, nil)
		}
	}
	close(stop)
	wg.Wait()
}

// Istio's ConfigMap carries template texts and aliases; the names are
// honoured, the texts are not rendered.
func TestIstioStyleTemplatesAndAliases(t *testing.T) {
	cfg, vals, err := ParseConfig([]byte(`policy: enabled
defaultTemplates: [sidecar]
templates:
  sidecar: "{{ this text is never rendered }}"
  grpc-agent: ""
aliases:
  grpc: [grpc-agent]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := Params{Namespace: "default", Config: cfg, Values: vals}
	got, _, err := Mutate(appPod(map[string]string{AnnotationTemplates: "grpc"}, nil), p)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := envValue(proxyOf(got), "ISTIO_META_GENERATOR"); v != "grpc" {
		t.Errorf("alias did not select grpc-agent")
	}
	if findContainer(got.Spec.InitContainers, InitContainerName) != nil {
		t.Error("grpc-agent must not add istio-init")
	}
	assertShape(t, got, []string{"app", "metrics"})
}
