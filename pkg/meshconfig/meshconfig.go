// Package meshconfig reads Istio's mesh configuration: the "mesh" key of the
// istio ConfigMap, which the chart mounts as the file /etc/istio/config/mesh
// (Istio's --meshConfig), as Istio's istiod reads it.
//
// Parse turns the YAML into istio.io/api's MeshConfig the way Istio's
// pkg/config/mesh ApplyMeshConfig does: YAML to JSON to protobuf, unknown
// fields ignored (a newer Istio's fields must not stop an older istiod),
// every top-level field the document names replacing the default as a
// whole, trustDomainAliases sorted and without repeats. Defaults are
// Istio's for the fields Bulwark reads (see Default); the rest stay unset.
//
// Validation is stricter than Istio's where a wrong value would weaken
// security or break proxies silently: the document is bounded (MaxBytes),
// trustDomain and every alias must be a SPIFFE trust domain made of DNS
// labels, rootNamespace a namespace name, outboundTrafficPolicy.mode a
// known mode and defaultConfig.discoveryAddress a host:port.
//
// Watcher keeps the file's current configuration and announces changes; a
// bad update is logged with its reason and the last good configuration
// keeps serving.
package meshconfig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Bounds on a mesh configuration. A ConfigMap holds at most 1 MiB.
const (
	MaxBytes              = 1 << 20
	MaxTrustDomainAliases = 64
	// MaxAccessLogFormat bounds accessLogFormat, a line's format.
	MaxAccessLogFormat = 16 << 10
)

// Defaults are the values that depend on how istiod runs.
type Defaults struct {
	// TrustDomain is used when the document names none; empty means
	// Istio's default, cluster.local.
	TrustDomain string
	// RootNamespace is used when the document names none: istiod's
	// namespace, as the chart writes it. Empty means Istio's default,
	// istio-system.
	RootNamespace string
}

// Istio's defaults (pkg/config/mesh DefaultMeshConfig).
const (
	DefaultTrustDomain   = "cluster.local"
	DefaultRootNamespace = "istio-system"
)

// Default returns the mesh configuration of an empty document: Istio's
// defaults for the fields Bulwark reads (trustDomain cluster.local, no
// aliases, enableAutoMtls true, outboundTrafficPolicy ALLOW_ANY,
// enablePrometheusMerge true, rootNamespace istio-system), with d's values
// where set. defaultConfig is left unset: the injector fills in this
// istiod's own address, as the chart's mesh does.
func Default(d Defaults) *meshv1alpha1.MeshConfig {
	return &meshv1alpha1.MeshConfig{
		TrustDomain:           cmp.Or(d.TrustDomain, DefaultTrustDomain),
		TrustDomainAliases:    []string{},
		EnableAutoMtls:        wrapperspb.Bool(true),
		OutboundTrafficPolicy: &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY},
		EnablePrometheusMerge: wrapperspb.Bool(true),
		RootNamespace:         cmp.Or(d.RootNamespace, DefaultRootNamespace),
	}
}

// Parse reads a mesh configuration document (YAML or JSON) over the
// defaults and validates it. Fields this version does not know are ignored
// and named in the returned warnings; an error says what is wrong.
func Parse(data []byte, d Defaults) (mc *meshv1alpha1.MeshConfig, warnings []string, err error) {
	if len(data) > MaxBytes {
		return nil, nil, fmt.Errorf("mesh config is %d bytes, more than the limit of %d", len(data), MaxBytes)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("mesh config is not YAML: %w", err)
	}
	mc = Default(d)
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return mc, nil, nil // an empty document: the defaults
	}
	var top map[string]json.RawMessage
	if js[0] != '{' || json.Unmarshal(js, &top) != nil {
		return nil, nil, errors.New("mesh config must be a mapping of MeshConfig fields")
	}
	parsed, warnings, err := UnmarshalJSON(js, false)
	if err != nil {
		return nil, nil, fieldError(top, err)
	}
	override(mc, parsed, top)
	slices.Sort(mc.TrustDomainAliases)
	mc.TrustDomainAliases = slices.Compact(mc.TrustDomainAliases)
	if err := Validate(mc); err != nil {
		return nil, nil, err
	}
	return mc, warnings, nil
}

// UnmarshalJSON decodes a MeshConfig as JSON. Unknown fields are an error
// when strict; otherwise they are ignored and named in the warnings, as
// Istio's decoder ignores them. An unknown enum value is an error either
// way, as in Istio: ignoring it would leave the enum's zero, which for
// outboundTrafficPolicy.mode is REGISTRY_ONLY.
func UnmarshalJSON(js []byte, strict bool) (mc *meshv1alpha1.MeshConfig, warnings []string, err error) {
	mc = &meshv1alpha1.MeshConfig{}
	strictErr := protojson.Unmarshal(js, mc)
	if strictErr == nil {
		return mc, nil, nil
	}
	if strict {
		return nil, nil, fmt.Errorf("mesh config: %w", ProtoError{strictErr})
	}
	var doc any
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, nil, fmt.Errorf("mesh config: %w", err)
	}
	var dropped []string
	doc = dropUnknown(doc, mc.ProtoReflect().Descriptor(), "", &dropped)
	known, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("mesh config: %w", err)
	}
	mc = &meshv1alpha1.MeshConfig{}
	if err := protojson.Unmarshal(known, mc); err != nil {
		return nil, nil, fmt.Errorf("mesh config: %w", ProtoError{err})
	}
	if len(dropped) > maxNamed {
		dropped = append(dropped[:maxNamed], "…")
	}
	return mc, []string{"ignored fields this istiod does not know: " + strings.Join(dropped, ", ")}, nil
}

// maxNamed bounds the unknown fields a warning names.
const maxNamed = 10

// dropUnknown removes from a decoded JSON value the keys that name no
// field of md, at every depth, and records their paths. Well-known types
// (Struct, Any, wrappers, durations) are left as they are.
func dropUnknown(v any, md protoreflect.MessageDescriptor, path string, dropped *[]string) any {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return v
	}
	fields := md.Fields()
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil {
			*dropped = append(*dropped, truncate(path+key, 128))
			delete(obj, key)
			continue
		}
		sub := fd.Message()
		if fd.IsMap() {
			sub = fd.MapValue().Message()
		}
		if sub == nil {
			continue
		}
		switch val := obj[key].(type) {
		case []any:
			for i := range val {
				val[i] = dropUnknown(val[i], sub, fmt.Sprintf("%s%s[%d].", path, key, i), dropped)
			}
		case map[string]any:
			if fd.IsMap() {
				for k := range val {
					val[k] = dropUnknown(val[k], sub, path+key+"."+k+".", dropped)
				}
			} else {
				obj[key] = dropUnknown(val, sub, path+key+".", dropped)
			}
		}
	}
	return obj
}

// fieldError names the top-level field whose value err is about, found
// by decoding each field alone.
func fieldError(top map[string]json.RawMessage, err error) error {
	for _, key := range slices.Sorted(maps.Keys(top)) {
		one, _ := json.Marshal(map[string]json.RawMessage{key: top[key]})
		if _, _, ferr := UnmarshalJSON(one, false); ferr != nil {
			return fmt.Errorf("mesh config field %.64q: %w", key, errors.Unwrap(ferr))
		}
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// override replaces in mc every top-level field the document names (with a
// value other than null) by its parsed value, as Istio's decoder sets each
// field it reads.
func override(mc, parsed *meshv1alpha1.MeshConfig, top map[string]json.RawMessage) {
	dst, src := mc.ProtoReflect(), parsed.ProtoReflect()
	fields := dst.Descriptor().Fields()
	for key, raw := range top {
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd)) // parsed is discarded: nothing is shared
		} else {
			dst.Clear(fd)
		}
	}
}

// Validate checks the fields Bulwark reads.
func Validate(mc *meshv1alpha1.MeshConfig) error {
	if err := ValidateTrustDomain(mc.GetTrustDomain()); err != nil {
		return fmt.Errorf("mesh config trustDomain: %w", err)
	}
	if n := len(mc.GetTrustDomainAliases()); n > MaxTrustDomainAliases {
		return fmt.Errorf("mesh config trustDomainAliases: %d aliases, more than the limit of %d", n, MaxTrustDomainAliases)
	}
	for i, alias := range mc.GetTrustDomainAliases() {
		if err := ValidateTrustDomain(alias); err != nil {
			return fmt.Errorf("mesh config trustDomainAliases[%d]: %w", i, err)
		}
	}
	if errs := validation.IsDNS1123Label(mc.GetRootNamespace()); len(errs) > 0 {
		return fmt.Errorf("mesh config rootNamespace %.64q is not a namespace name: %s", mc.GetRootNamespace(), errs[0])
	}
	if p := mc.GetOutboundTrafficPolicy(); p != nil {
		switch p.GetMode() {
		case meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY, meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY:
		default:
			return fmt.Errorf("mesh config outboundTrafficPolicy.mode %d: want REGISTRY_ONLY or ALLOW_ANY", p.GetMode())
		}
	}
	if n := len(mc.GetAccessLogFormat()); n > MaxAccessLogFormat {
		return fmt.Errorf("mesh config accessLogFormat: %d bytes, more than the limit of %d", n, MaxAccessLogFormat)
	}
	if addr := mc.GetDefaultConfig().GetDiscoveryAddress(); addr != "" {
		if err := validateHostPort(addr); err != nil {
			return fmt.Errorf("mesh config defaultConfig.discoveryAddress: %w", err)
		}
	}
	return nil
}

// ValidateTrustDomain accepts a trust domain that is both a SPIFFE trust
// domain name and a dot-separated list of DNS labels (Istio's rule), so
// that no principal or certificate built from it is ambiguous.
func ValidateTrustDomain(td string) error {
	if td == "" {
		return errors.New("empty")
	}
	if _, err := spiffeid.TrustDomainFromString(td); err != nil {
		return fmt.Errorf("%.64q is not a SPIFFE trust domain: %w", td, err)
	}
	labels := strings.Split(strings.TrimSuffix(td, "."), ".")
	for _, l := range labels {
		if errs := validation.IsDNS1123Label(l); len(errs) > 0 {
			return fmt.Errorf("%.64q: label %.64q: %s", td, l, errs[0])
		}
	}
	return nil
}

func validateHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%.128q is not host:port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%.128q: port %q is not 1-65535", addr, port)
	}
	if net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
		return fmt.Errorf("%.128q: host %q is neither an IP address nor a DNS name", addr, host)
	}
	return nil
}

// ProtoError reports a protobuf decoding error with plain spaces: the
// protobuf runtime randomly uses non-breaking spaces in its messages to
// keep callers from matching on them, which would make logged reasons and
// admission denials flap.
type ProtoError struct{ Err error }

func (e ProtoError) Error() string { return strings.ReplaceAll(e.Err.Error(), "\u00a0", " ") }

func (e ProtoError) Unwrap() error { return e.Err }
