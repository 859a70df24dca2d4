package model

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	securityv1 "istio.io/api/security/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

const service = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 8080, targetPort: 9000}, {name: admin, port: 8081}]
`

const workload = `
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: app}
spec:
  address: 10.0.0.2
  labels: {app: echo}
  serviceAccount: echo
  ports: {grpc: 9443}
`

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDir(t *testing.T) {
	tests := map[string]struct {
		files map[string]string
		err   bool
	}{
		"services and workloads in separate files load":          {files: map[string]string{"a.yaml": service, "b.yml": workload}},
		"several documents in one file load":                     {files: map[string]string{"a.yaml": service + "---" + workload}},
		"files of other extensions and hidden files are skipped": {files: map[string]string{"a.yaml": service, "notes.txt": "junk", ".x.yaml": "junk: ["}},
		"an unknown spec field is rejected": {err: true, files: map[string]string{"a.yaml": `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: x, namespace: app}
spec: {mtls: {mode: STRICT}, mtlsTypo: 1}`}},
		"an unknown Service field is rejected": {err: true, files: map[string]string{"a.yaml": strings.Replace(service, "selector:", "selectr:", 1)}},
		"a duplicate key is rejected":          {err: true, files: map[string]string{"a.yaml": "apiVersion: v1\nkind: Service\nkind: Service\nmetadata: {name: x}\n"}},
		"an unknown kind is rejected":          {err: true, files: map[string]string{"a.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"}},
		"a wrongly typed field is rejected": {err: true, files: map[string]string{"a.yaml": `
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: x}
spec: {address: 10.0.0.1, ports: {grpc: "many"}}`}},
		"a WorkloadEntry without address is rejected":     {err: true, files: map[string]string{"a.yaml": "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: x}\nspec: {}\n"}},
		"a file over the size limit is rejected":          {err: true, files: map[string]string{"a.yaml": "#" + strings.Repeat("x", MaxFileBytes)}},
		"a Service with cluster IPs loads":                {files: map[string]string{"a.yaml": strings.Replace(service, "selector:", "clusterIPs: [10.96.0.1, 'fd00::1']\n  selector:", 1)}},
		"a headless Service loads":                        {files: map[string]string{"a.yaml": strings.Replace(service, "selector:", "clusterIP: None\n  selector:", 1)}},
		"a cluster IP that is not an address is rejected": {err: true, files: map[string]string{"a.yaml": strings.Replace(service, "selector:", "clusterIP: 10.96.0.300\n  selector:", 1)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := LoadDir(writeDir(t, tc.files), Options{})
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %t", err, tc.err)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	snap, err := LoadDir(writeDir(t, map[string]string{"a.yaml": service + "---" + workload}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := snap.Service("echo.app.svc.cluster.local")
	if svc == nil {
		t.Fatal("no service")
	}
	// The WorkloadEntry's port for the port name wins; else the target port
	// or the service port.
	if eps := svc.Endpoints[8080]; len(eps) != 1 || eps[0].Port != 9443 || eps[0].ServiceAccount != "echo" {
		t.Errorf("grpc endpoints %+v", eps)
	}
	if eps := svc.Endpoints[8081]; len(eps) != 1 || eps[0].Port != 8081 {
		t.Errorf("admin endpoints %+v", eps)
	}
}

func TestMTLSMode(t *testing.T) {
	pa := func(ns, name, body string) string {
		return "\n---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec: " + body + "\n"
	}
	aged := func(ns, name, created, body string) string {
		return "\n---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: " + name + ", namespace: " + ns +
			", creationTimestamp: \"" + created + "\"}\nspec: " + body + "\n"
	}
	echo := map[string]string{"app": "echo"}
	tests := map[string]struct {
		policies string
		port     uint32
		want     MTLSMode
	}{
		"without policies the mode is PERMISSIVE": {want: MTLSPermissive},
		"the mesh policy applies":                 {policies: pa("istio-system", "mesh", "{mtls: {mode: STRICT}}"), want: MTLSStrict},
		"the namespace policy overrides the mesh": {
			policies: pa("istio-system", "mesh", "{mtls: {mode: STRICT}}") + pa("app", "ns", "{mtls: {mode: DISABLE}}"),
			want:     MTLSDisable,
		},
		"a workload policy overrides the namespace": {
			policies: pa("app", "ns", "{mtls: {mode: DISABLE}}") + pa("app", "w", "{selector: {matchLabels: {app: echo}}, mtls: {mode: STRICT}}"),
			want:     MTLSStrict,
		},
		"UNSET inherits from the namespace": {
			policies: pa("app", "ns", "{mtls: {mode: STRICT}}") + pa("app", "w", "{selector: {matchLabels: {app: echo}}, mtls: {mode: UNSET}}"),
			want:     MTLSStrict,
		},
		"a port-level setting applies to its port only": {
			policies: pa("app", "w", "{selector: {matchLabels: {app: echo}}, mtls: {mode: STRICT}, portLevelMtls: {9000: {mode: DISABLE}}}"),
			port:     9000, want: MTLSDisable,
		},
		"a workload policy of another workload does not apply": {
			policies: pa("app", "w", "{selector: {matchLabels: {app: other}}, mtls: {mode: STRICT}}"),
			want:     MTLSPermissive,
		},
		"of two namespace policies the older applies, whatever their names": {
			policies: aged("app", "allow-legacy", "2026-02-01T00:00:00Z", "{mtls: {mode: PERMISSIVE}}") +
				aged("app", "default", "2026-01-01T00:00:00Z", "{mtls: {mode: STRICT}}"),
			want: MTLSStrict,
		},
		"the older applies when it is the more permissive": {
			policies: aged("app", "allow-legacy", "2026-01-01T00:00:00Z", "{mtls: {mode: PERMISSIVE}}") +
				aged("app", "default", "2026-02-01T00:00:00Z", "{mtls: {mode: STRICT}}"),
			want: MTLSPermissive,
		},
		"of two workload policies created in the same second the first by name applies": {
			policies: aged("app", "b", "2026-01-01T00:00:00Z", "{selector: {matchLabels: {app: echo}}, mtls: {mode: DISABLE}}") +
				aged("app", "a", "2026-01-01T00:00:00Z", "{selector: {matchLabels: {app: echo}}, mtls: {mode: STRICT}}"),
			want: MTLSStrict,
		},
		"a namespace policy of another namespace does not apply": {
			policies: pa("other", "ns", "{mtls: {mode: STRICT}}"),
			want:     MTLSPermissive,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			snap, err := LoadDir(writeDir(t, map[string]string{"a.yaml": service + tc.policies}), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := snap.MTLSMode("app", echo, cmpOr(tc.port, 8080)); got != tc.want {
				t.Fatalf("mode %s, want %s", got, tc.want)
			}
		})
	}
}

func cmpOr(a, b uint32) uint32 {
	if a != 0 {
		return a
	}
	return b
}

func TestFileSourceKeepsLastGoodSnapshot(t *testing.T) {
	dir := writeDir(t, map[string]string{"a.yaml": service})
	store := NewStore()
	var logs bytes.Buffer
	src := NewFileSource(FileConfig{Dir: dir, Publisher: store, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	src.Reload()
	good := store.Current()
	if good.Service("echo.app.svc.cluster.local") == nil {
		t.Fatal("service not loaded")
	}
	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("kind: [broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	src.Reload()
	if store.Current() != good {
		t.Fatal("a bad file replaced the snapshot")
	}
	if !strings.Contains(logs.String(), "b.yaml") {
		t.Errorf("the bad file is not named in the log: %s", logs.String())
	}
}

func TestFileSourceWatches(t *testing.T) {
	dir := t.TempDir()
	store := NewStore()
	updates, cancel := store.Subscribe()
	defer cancel()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = NewFileSource(FileConfig{Dir: dir, Publisher: store, Debounce: 10 * time.Millisecond}).Run(ctx)
		close(done)
	}()
	defer func() { stop(); <-done }()
	<-updates // the empty directory
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(service), 0o600); err != nil {
		t.Fatal(err)
	}
	for snap := range updates {
		if snap.Service("echo.app.svc.cluster.local") != nil {
			return
		}
	}
}

func TestAuthorizationPoliciesForAWorkload(t *testing.T) {
	snap := Build("v", Options{}, Resources{AuthorizationPolicies: []*AuthorizationPolicy{
		{Meta: Meta{Name: "ns-wide", Namespace: "app"}, Spec: &securityv1.AuthorizationPolicy{}},
		{Meta: Meta{Name: "selected", Namespace: "app"}, Spec: &securityv1.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}}}},
		{Meta: Meta{Name: "other-workload", Namespace: "app"}, Spec: &securityv1.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "web"}}}},
		{Meta: Meta{Name: "gateway", Namespace: "app"}, Spec: &securityv1.AuthorizationPolicy{TargetRefs: []*typev1beta1.PolicyTargetReference{{Kind: "Gateway", Name: "gw"}}}},
		{Meta: Meta{Name: "mesh", Namespace: DefaultRootNamespace}, Spec: &securityv1.AuthorizationPolicy{}},
		{Meta: Meta{Name: "elsewhere", Namespace: "web"}, Spec: &securityv1.AuthorizationPolicy{}},
	}})
	var got []string
	for _, p := range snap.AuthorizationPolicies("app", map[string]string{"app": "echo"}) {
		got = append(got, p.Namespace+"/"+p.Name)
	}
	if want := []string{"app/ns-wide", "app/selected", "istio-system/mesh"}; !slices.Equal(got, want) {
		t.Errorf("policies %v, want %v (a targetRef policy is a gateway's)", got, want)
	}
}

func TestRequestAuthenticationsForAWorkload(t *testing.T) {
	snap := Build("v", Options{}, Resources{RequestAuthentications: []*RequestAuthentication{
		{Meta: Meta{Name: "ns-wide", Namespace: "app"}, Spec: &securityv1.RequestAuthentication{}},
		{Meta: Meta{Name: "selected", Namespace: "app"}, Spec: &securityv1.RequestAuthentication{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}}}},
		{Meta: Meta{Name: "other-workload", Namespace: "app"}, Spec: &securityv1.RequestAuthentication{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "web"}}}},
		{Meta: Meta{Name: "gateway", Namespace: "app"}, Spec: &securityv1.RequestAuthentication{TargetRef: &typev1beta1.PolicyTargetReference{Kind: "Gateway", Name: "gw"}}},
		{Meta: Meta{Name: "mesh", Namespace: DefaultRootNamespace}, Spec: &securityv1.RequestAuthentication{}},
		{Meta: Meta{Name: "mesh-selected", Namespace: DefaultRootNamespace}, Spec: &securityv1.RequestAuthentication{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}}}},
		{Meta: Meta{Name: "elsewhere", Namespace: "web"}, Spec: &securityv1.RequestAuthentication{}},
	}})
	var got []string
	for _, p := range snap.RequestAuthentications("app", map[string]string{"app": "echo"}) {
		got = append(got, p.Namespace+"/"+p.Name)
	}
	if want := []string{"app/ns-wide", "app/selected", "istio-system/mesh", "istio-system/mesh-selected"}; !slices.Equal(got, want) {
		t.Errorf("policies %v, want %v (a targetRef policy is a gateway's)", got, want)
	}
}

func TestWithRootNamespaceMovesMeshWidePolicies(t *testing.T) {
	snap := Build("v1", Options{}, Resources{
		PeerAuthentications: []*PeerAuthentication{
			{Meta: Meta{Name: "default", Namespace: "mesh-root"}, Spec: &securityv1.PeerAuthentication{Mtls: &securityv1.PeerAuthentication_MutualTLS{Mode: securityv1.PeerAuthentication_MutualTLS_STRICT}}},
		},
		AuthorizationPolicies: []*AuthorizationPolicy{
			{Meta: Meta{Name: "deny-all", Namespace: "mesh-root"}, Spec: &securityv1.AuthorizationPolicy{}},
			{Meta: Meta{Name: "old", Namespace: DefaultRootNamespace}, Spec: &securityv1.AuthorizationPolicy{}},
		},
	})
	moved := snap.WithRootNamespace("mesh-root")
	if got := moved.MTLSMode("app", nil, 80); got != MTLSStrict {
		t.Errorf("mode under root mesh-root: %s, want the mesh-root policy's STRICT", got)
	}
	if got := snap.MTLSMode("app", nil, 80); got != MTLSPermissive {
		t.Errorf("the original snapshot changed: mode %s", got)
	}
	var names []string
	for _, p := range moved.AuthorizationPolicies("app", nil) {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if want := []string{"mesh-root/deny-all"}; !slices.Equal(names, want) {
		t.Errorf("policies under root mesh-root: %v, want %v", names, want)
	}
	if moved.Version == snap.Version || moved.Version == "" {
		t.Errorf("version %q beside %q: a snapshot with another root must not share its version", moved.Version, snap.Version)
	}
	if snap.WithRootNamespace(DefaultRootNamespace) != snap || snap.WithRootNamespace("") != snap {
		t.Error("the same or no root namespace must give the snapshot itself")
	}
	if Build("", Options{}, Resources{}).WithRootNamespace("x").Version != "" {
		t.Error("an unsynced snapshot (no version) must stay unsynced")
	}
}

func TestHeadlessIsClusterIPNone(t *testing.T) {
	for name, tc := range map[string]struct {
		clusterIP string
		headless  bool
	}{
		"a Service whose cluster IP is None is headless": {"clusterIP: None\n  ", true},
		"a Service without a cluster IP is not headless": {"", false},
		"a Service with a cluster IP is not headless":    {"clusterIP: 10.96.0.1\n  ", false},
	} {
		t.Run(name, func(t *testing.T) {
			snap, err := LoadDir(writeDir(t, map[string]string{"a.yaml": strings.Replace(service, "selector:", tc.clusterIP+"selector:", 1)}), Options{})
			if err != nil {
				t.Fatal(err)
			}
			svcs := snap.Services()
			if len(svcs) != 1 || svcs[0].Headless != tc.headless {
				t.Errorf("services %+v, want one with Headless %v", svcs, tc.headless)
			}
		})
	}
}

func TestDestinationRuleForAWorkload(t *testing.T) {
	const host = "echo.app.svc.cluster.local"
	dr := func(ns, name string, selector map[string]string) *DestinationRule {
		spec := &networkingv1.DestinationRule{Host: host}
		if selector != nil {
			spec.WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: selector}
		}
		return &DestinationRule{Meta: Meta{Name: name, Namespace: ns}, Spec: spec}
	}
	snap := Build("v", Options{}, Resources{
		Services: []*Service{{Meta: Meta{Name: "echo", Namespace: "app"}}},
		DestinationRules: []*DestinationRule{
			dr("app", "all", nil),
			dr("app", "sleep", map[string]string{"app": "sleep"}),
			dr("web", "only-selected", map[string]string{"app": "web"}),
			dr("istio-system", "mesh", nil),
			dr("istio-system", "mesh-selected", map[string]string{"app": "web"}),
		},
	})
	for name, tc := range map[string]struct {
		ns     string
		labels map[string]string
		want   string
	}{
		"a selected workload gets its rule":                                            {"app", map[string]string{"app": "sleep"}, "app/sleep"},
		"another workload of the namespace gets the rule without selector":             {"app", map[string]string{"app": "other"}, "app/all"},
		"a workload of the service's namespace is not selected by the rule of another": {"db", map[string]string{"app": "sleep"}, "app/all"},
		"a namespace whose only rule selects others has none for the rest":             {"web", map[string]string{"app": "other"}, ""},
		"that namespace's selected workload gets it":                                   {"web", map[string]string{"app": "web"}, "web/only-selected"},
	} {
		t.Run(name, func(t *testing.T) {
			got := ""
			if r := snap.DestinationRuleFor(host, tc.ns, tc.labels); r != nil {
				got = r.Namespace + "/" + r.Name
			}
			if got != tc.want {
				t.Errorf("rule %q, want %q", got, tc.want)
			}
		})
	}
}
