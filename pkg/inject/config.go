package inject

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Built-in defaults. The Helm chart ships these same files in the
// istio-sidecar-injector ConfigMap.
//
//go:embed defaults/config.yaml defaults/values.json
var defaultFiles embed.FS

// Names of the templates this injector knows. Templates are built as typed
// Go values, never rendered from text.
const (
	TemplateSidecar   = "sidecar"
	TemplateGRPCAgent = "grpc-agent"
	// TemplateGateway is the proxy of a gateway Deployment (Istio's
	// istio/gateway chart): Envoy as a router, no traffic capture.
	TemplateGateway = "gateway"
)

var builtinTemplates = map[string]bool{TemplateSidecar: true, TemplateGRPCAgent: true, TemplateGateway: true}

// Policy is Istio's injection policy.
type Policy string

// Injection policies.
const (
	PolicyEnabled  Policy = "enabled"
	PolicyDisabled Policy = "disabled"
)

// Config is the "config" key of the istio-sidecar-injector ConfigMap.
type Config struct {
	Policy               Policy                 `json:"policy"`
	AlwaysInjectSelector []metav1.LabelSelector `json:"alwaysInjectSelector,omitempty"`
	NeverInjectSelector  []metav1.LabelSelector `json:"neverInjectSelector,omitempty"`
	InjectedAnnotations  map[string]string      `json:"injectedAnnotations,omitempty"`
	DefaultTemplates     []string               `json:"defaultTemplates,omitempty"`
	// Templates is accepted for compatibility with Istio's ConfigMap: each
	// name must be a built-in template and its text is not used.
	Templates map[string]string `json:"templates,omitempty"`
	// Aliases maps a template name used in annotations to built-in names.
	Aliases map[string][]string `json:"aliases,omitempty"`

	always, never []labels.Selector
}

var loadDefaults = sync.OnceValues(func() ([]byte, []byte) {
	c, err := defaultFiles.ReadFile("defaults/config.yaml")
	if err != nil {
		panic(err) // embedded at build time: cannot fail
	}
	v, err := defaultFiles.ReadFile("defaults/values.json")
	if err != nil {
		panic(err)
	}
	return c, v
})

// DefaultConfigFiles returns the embedded config YAML and values JSON.
func DefaultConfigFiles() (configYAML, valuesJSON []byte) {
	c, v := loadDefaults()
	return bytes.Clone(c), bytes.Clone(v)
}

// ParseConfig parses the ConfigMap's "config" YAML and "values" JSON
// strictly. Empty input means the built-in default; values are laid over the
// built-in default values, so a partial values document is enough.
func ParseConfig(configYAML, valuesJSON []byte) (*Config, *Values, error) {
	defCfg, defVals := loadDefaults()
	if len(bytes.TrimSpace(configYAML)) == 0 {
		configYAML = defCfg
	}
	cfg := &Config{}
	if err := yaml.UnmarshalStrict(configYAML, cfg); err != nil {
		return nil, nil, fmt.Errorf("parse injector config: %w", err)
	}
	if err := cfg.compile(); err != nil {
		return nil, nil, fmt.Errorf("injector config: %w", err)
	}

	vals := &Values{}
	if err := decodeStrictJSON(defVals, vals); err != nil {
		return nil, nil, fmt.Errorf("parse default values: %w", err)
	}
	if len(bytes.TrimSpace(valuesJSON)) > 0 {
		if err := decodeStrictJSON(valuesJSON, vals); err != nil {
			return nil, nil, fmt.Errorf("parse injector values: %w", err)
		}
	}
	mesh, err := parseMeshConfig(vals.MeshConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("parse injector values: %w", err)
	}
	vals.mesh = mesh
	if err := vals.validate(); err != nil {
		return nil, nil, fmt.Errorf("injector values: %w", err)
	}
	if pc := mesh.GetDefaultConfig(); pc != nil {
		if err := checkProxyConfig(pc); err != nil {
			return nil, nil, fmt.Errorf("injector values meshConfig.defaultConfig: %w", err)
		}
	}
	return cfg, vals, nil
}

func decodeStrictJSON(b []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON document")
	}
	return nil
}

func (c *Config) compile() error {
	switch c.Policy {
	case PolicyEnabled, PolicyDisabled:
	default:
		return fmt.Errorf("policy %.40q: must be enabled or disabled", c.Policy)
	}
	for name := range c.Templates {
		if !builtinTemplates[name] {
			return fmt.Errorf("templates: %.60q is not a built-in template (known: %s)", name, knownTemplates())
		}
	}
	for alias, targets := range c.Aliases {
		for _, t := range targets {
			if !builtinTemplates[t] {
				return fmt.Errorf("aliases %.60q: %.60q is not a built-in template", alias, t)
			}
		}
	}
	if len(c.DefaultTemplates) == 0 {
		c.DefaultTemplates = []string{TemplateSidecar}
	}
	if _, err := c.resolveTemplates(c.DefaultTemplates); err != nil {
		return fmt.Errorf("defaultTemplates: %w", err)
	}
	for k, v := range c.InjectedAnnotations {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("injectedAnnotations key %.80q: %s", k, strings.Join(errs, "; "))
		}
		if len(v) > 4096 {
			return fmt.Errorf("injectedAnnotations %.80q: value too long", k)
		}
	}
	var err error
	if c.always, err = compileSelectors(c.AlwaysInjectSelector); err != nil {
		return fmt.Errorf("alwaysInjectSelector: %w", err)
	}
	if c.never, err = compileSelectors(c.NeverInjectSelector); err != nil {
		return fmt.Errorf("neverInjectSelector: %w", err)
	}
	return nil
}

func compileSelectors(in []metav1.LabelSelector) ([]labels.Selector, error) {
	out := make([]labels.Selector, 0, len(in))
	for i := range in {
		s, err := metav1.LabelSelectorAsSelector(&in[i])
		if err != nil {
			return nil, fmt.Errorf("selector %d: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// resolveTemplates expands aliases and checks the list names exactly one
// known template family. An empty entry ("gateway,") is an unknown
// template, as it is to Istio's injector.
func (c *Config) resolveTemplates(names []string) (string, error) {
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			return "", fmt.Errorf("empty template name (known: %s)", knownTemplates())
		}
		targets, ok := c.Aliases[n]
		if !ok {
			targets = []string{n}
		}
		for _, t := range targets {
			if !builtinTemplates[t] {
				return "", fmt.Errorf("unknown template %.60q (known: %s)", t, knownTemplates())
			}
			seen[t] = true
		}
	}
	switch {
	case len(seen) == 0:
		return "", errors.New("no template named")
	case len(seen) > 1:
		names := make([]string, 0, len(seen))
		for t := range seen {
			names = append(names, t)
		}
		sort.Strings(names)
		return "", fmt.Errorf("templates %s cannot be combined: one template builds the whole proxy", strings.Join(names, ", "))
	}
	for t := range seen {
		return t, nil
	}
	return "", nil
}

func knownTemplates() string {
	names := make([]string, 0, len(builtinTemplates))
	for n := range builtinTemplates {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
