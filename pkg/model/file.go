package model

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
	securityv1 "istio.io/api/security/v1"
	telemetryv1 "istio.io/api/telemetry/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
)

// Limits on what a model directory may hold.
const (
	MaxFileBytes = 1 << 20
	MaxFiles     = 1000
	MaxDocuments = 10000
)

// ErrInvalid marks a manifest that cannot be part of the model.
var ErrInvalid = errors.New("invalid manifest")

// FileConfig configures a FileSource.
type FileConfig struct {
	Dir       string
	Publisher Publisher
	Options   Options
	Debounce  time.Duration // default dirwatch.DefaultDebounce
	Resync    time.Duration // default 30s
	Logger    *slog.Logger
}

// FileSource builds snapshots from a directory of manifests.
type FileSource struct {
	cfg FileConfig
}

// NewFileSource returns a source for cfg. It does no I/O.
func NewFileSource(cfg FileConfig) *FileSource {
	cfg.Debounce = cmp.Or(cfg.Debounce, dirwatch.DefaultDebounce)
	cfg.Resync = cmp.Or(cfg.Resync, 30*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &FileSource{cfg: cfg}
}

// Run reads the directory now and on every change until ctx is done.
func (f *FileSource) Run(ctx context.Context) error {
	dirwatch.Run(ctx, f.cfg.Dir, f.cfg.Debounce, f.cfg.Resync, f.cfg.Logger, f.Reload)
	return nil
}

// Reload reads the directory once and publishes the snapshot; a bad
// directory is logged and the last good snapshot kept.
func (f *FileSource) Reload() {
	snap, err := LoadDir(f.cfg.Dir, f.cfg.Options)
	if err != nil {
		f.cfg.Logger.Error("mesh model not updated; keeping the last good one", "dir", f.cfg.Dir, "err", err)
		return
	}
	f.cfg.Publisher.Publish(snap)
}

// LoadDir reads every manifest of dir into a snapshot whose version is the
// hash of the files' contents. A missing directory is an empty model.
func LoadDir(dir string, opts Options) (*Snapshot, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return Build(hashOf(nil), opts, Resources{}), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read model directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || e.IsDir() {
			continue
		}
		switch filepath.Ext(n) {
		case ".yaml", ".yml", ".json":
			names = append(names, n)
		}
	}
	if len(names) > MaxFiles {
		return nil, fmt.Errorf("read model directory: %d files, limit %d: %w", len(names), MaxFiles, ErrInvalid)
	}
	slices.Sort(names)
	var res Resources
	h := sha256.New()
	docs := 0
	for _, n := range names {
		data, err := readBounded(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(data))
		h.Write(data)
		m, err := decodeFile(data, &res, &docs)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", n, m, err)
		}
	}
	sortResources(&res)
	return Build(hex.EncodeToString(h.Sum(nil))[:16], opts, res), nil
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

func readBounded(path string) ([]byte, error) {
	data, err := dirwatch.ReadFile(path, MaxFileBytes)
	switch {
	case errors.Is(err, dirwatch.ErrTooLarge):
		return nil, fmt.Errorf("manifest: %w: %w", err, ErrInvalid)
	case err != nil:
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return data, nil
}

// envelope is the common part of a manifest.
type envelope struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name              string    `json:"name"`
		Namespace         string    `json:"namespace"`
		CreationTimestamp time.Time `json:"creationTimestamp"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// decodeFile adds the documents of data to res. It returns the index of the
// document that failed.
func decodeFile(data []byte, res *Resources, docs *int) (int, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReaderSize(bytes.NewReader(data), 4096))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return i, nil
		}
		if err != nil {
			return i, fmt.Errorf("split documents: %w: %w", ErrInvalid, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || isComment(doc) {
			continue
		}
		if *docs++; *docs > MaxDocuments {
			return i, fmt.Errorf("more than %d documents: %w", MaxDocuments, ErrInvalid)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return i, fmt.Errorf("yaml: %w: %w", ErrInvalid, err)
		}
		if err := decodeDocument(js, res); err != nil {
			return i, err
		}
	}
}

func isComment(doc []byte) bool {
	for line := range strings.SplitSeq(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}

func decodeDocument(js []byte, res *Resources) error {
	var env envelope
	if err := json.Unmarshal(js, &env); err != nil {
		return fmt.Errorf("manifest: %w: %w", ErrInvalid, err)
	}
	meta := Meta{Name: env.Metadata.Name, Namespace: cmp.Or(env.Metadata.Namespace, "default")}
	if meta.Name == "" {
		return fmt.Errorf("%s without metadata.name: %w", env.Kind, ErrInvalid)
	}
	switch env.APIVersion + "/" + env.Kind {
	case "v1/Service":
		svc, err := decodeService(js, meta)
		if err != nil {
			return err
		}
		res.Services = append(res.Services, svc)
	case "networking.istio.io/v1/WorkloadEntry":
		spec := &networkingv1.WorkloadEntry{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		if spec.GetAddress() == "" {
			return fmt.Errorf("WorkloadEntry %s/%s without address: %w", meta.Namespace, meta.Name, ErrInvalid)
		}
		res.Workloads = append(res.Workloads, &Workload{Meta: meta, Spec: spec})
	case "security.istio.io/v1/PeerAuthentication":
		spec := &securityv1.PeerAuthentication{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.PeerAuthentications = append(res.PeerAuthentications,
			&PeerAuthentication{Meta: meta, Created: env.Metadata.CreationTimestamp, Spec: spec})
	case "security.istio.io/v1/AuthorizationPolicy":
		spec := &securityv1.AuthorizationPolicy{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.AuthorizationPolicies = append(res.AuthorizationPolicies, &AuthorizationPolicy{Meta: meta, Spec: spec})
	case "security.istio.io/v1/RequestAuthentication":
		spec := &securityv1.RequestAuthentication{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.RequestAuthentications = append(res.RequestAuthentications, &RequestAuthentication{Meta: meta, Spec: spec})
	case "networking.istio.io/v1/DestinationRule":
		spec := &networkingv1.DestinationRule{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.DestinationRules = append(res.DestinationRules, &DestinationRule{Meta: meta, Created: env.Metadata.CreationTimestamp, Spec: spec})
	case "networking.istio.io/v1/Gateway":
		spec := &networkingv1.Gateway{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.Gateways = append(res.Gateways, &Gateway{Meta: meta, Created: env.Metadata.CreationTimestamp, Spec: spec})
	case "networking.istio.io/v1/VirtualService":
		spec := &networkingv1.VirtualService{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.VirtualServices = append(res.VirtualServices,
			&VirtualService{Meta: meta, Created: env.Metadata.CreationTimestamp, Spec: spec})
	case "networking.istio.io/v1/ServiceEntry":
		spec := &networkingv1.ServiceEntry{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		if len(spec.GetHosts()) == 0 {
			return fmt.Errorf("ServiceEntry %s/%s without hosts: %w", meta.Namespace, meta.Name, ErrInvalid)
		}
		res.ServiceEntries = append(res.ServiceEntries,
			&ServiceEntry{Meta: meta, Created: env.Metadata.CreationTimestamp, Spec: spec})
	case "telemetry.istio.io/v1/Telemetry", "telemetry.istio.io/v1alpha1/Telemetry":
		spec := &telemetryv1.Telemetry{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.Telemetries = append(res.Telemetries, &Telemetry{Meta: meta, Created: env.Metadata.CreationTimestamp, Spec: spec})
	case "networking.istio.io/v1/Sidecar":
		spec := &networkingv1.Sidecar{}
		if err := decodeSpec(env, spec); err != nil {
			return err
		}
		res.Sidecars = append(res.Sidecars, &Sidecar{Meta: meta, Created: env.Metadata.CreationTimestamp, Spec: spec})
	default:
		return fmt.Errorf("unknown kind %s %s: %w", env.APIVersion, env.Kind, ErrInvalid)
	}
	return nil
}

// decodeSpec decodes the spec strictly: unknown fields are errors.
func decodeSpec(env envelope, spec proto.Message) error {
	if len(env.Spec) == 0 {
		env.Spec = []byte("{}")
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(env.Spec, spec); err != nil {
		return fmt.Errorf("%s %s spec: %w: %w", env.Kind, env.Metadata.Name, ErrInvalid, err)
	}
	return nil
}

func decodeService(js []byte, meta Meta) (*Service, error) {
	var k corev1.Service
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return nil, fmt.Errorf("Service %s: %w: %w", meta.Name, ErrInvalid, err)
	}
	svc := &Service{Meta: meta, Selector: k.Spec.Selector, ExportTo: ParseExportTo(k.Annotations[ExportToAnnotation])}
	ips := k.Spec.ClusterIPs
	if len(ips) == 0 && k.Spec.ClusterIP != "" {
		ips = []string{k.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip == corev1.ClusterIPNone {
			svc.Headless = true
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			return nil, fmt.Errorf("Service %s: cluster IP %q: %w", meta.Name, ip, ErrInvalid)
		}
		svc.Addresses = append(svc.Addresses, a.String())
	}
	for _, p := range k.Spec.Ports {
		if p.Port <= 0 || p.Port > 65535 {
			return nil, fmt.Errorf("Service %s: port %d: %w", meta.Name, p.Port, ErrInvalid)
		}
		target := uint32(p.TargetPort.IntValue())
		if target > 65535 {
			return nil, fmt.Errorf("Service %s: target port %d: %w", meta.Name, target, ErrInvalid)
		}
		port := Port{Name: p.Name, Port: uint32(p.Port), TargetPort: target, Protocol: string(p.Protocol)}
		if p.AppProtocol != nil && *p.AppProtocol != "" {
			port.Protocol = *p.AppProtocol
		}
		svc.Ports = append(svc.Ports, port)
	}
	return svc, nil
}

func sortResources(r *Resources) {
	slices.SortStableFunc(r.Services, func(a, b *Service) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.Workloads, func(a, b *Workload) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.PeerAuthentications, func(a, b *PeerAuthentication) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.AuthorizationPolicies, func(a, b *AuthorizationPolicy) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.RequestAuthentications, func(a, b *RequestAuthentication) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.DestinationRules, func(a, b *DestinationRule) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.Gateways, func(a, b *Gateway) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.VirtualServices, func(a, b *VirtualService) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.ServiceEntries, func(a, b *ServiceEntry) int { return byMeta(a.Meta, b.Meta) })
	slices.SortStableFunc(r.Telemetries, compareTelemetries)
	slices.SortStableFunc(r.Sidecars, func(a, b *Sidecar) int { return byMeta(a.Meta, b.Meta) })
}
