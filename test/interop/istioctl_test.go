package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// istioctl runs Istio's istioctl against the test apiserver and istiod's
// xDS address, as an operator with the cluster's kubeconfig would, with
// istiodNS as Istio's namespace (-i): istioctl asks istiod over xDS with a
// token of that namespace's "default" service account.
func istioctl(t *testing.T, bins peers, env *testenv.Env, p *istiod, istioNS string, args ...string) string {
	t.Helper()
	args = append(args, "--kubeconfig", env.Kubeconfig, "--istioNamespace", istioNS, "--xds-address", p.SecureGRPCAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.istioctl, args...)
	cmd.Env = isolatedEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("istioctl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// checkIstioctl runs istioctl proxy-status (all proxies, table and JSON;
// one proxy against its Envoy's config dump) and version against istiod,
// with the stand-in Envoy of w connected through pilot-agent a.
func checkIstioctl(t *testing.T, env *testenv.Env, bins peers, p *istiod, istiodNS string, w workload, a *envoyAgent) {
	other := env.Namespace(t)
	for _, ns := range []string{istiodNS, w.Namespace, other} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
		if _, err := env.Client(t).CoreV1().ServiceAccounts(ns).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("service account default in %s: %v", ns, err)
		}
	}
	proxy := w.Name + "." + w.Namespace
	out, err := exec.Command(istiodBinary(t), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(out))

	t.Run("proxy-status lists the sidecar with every type SYNCED and istiod's name", func(t *testing.T) {
		var resp *discoveryv3.DiscoveryResponse
		var cc *statusv3.ClientConfig
		for deadline := time.Now().Add(envoyWait); ; time.Sleep(500 * time.Millisecond) {
			resp = proxyStatusJSON(t, istioctl(t, bins, env, p, istiodNS, "proxy-status", "-o", "json"))
			cc = clientConfigOf(t, resp, proxy)
			if cc != nil && allSynced(cc) || time.Now().After(deadline) {
				break
			}
		}
		if cc == nil || !allSynced(cc) {
			t.Fatalf("proxy-status -o json: %s not listed with CDS, LDS, EDS and RDS SYNCED: %v", proxy, cc)
		}
		var cp struct {
			Component, ID string
			Info          struct{ Version string }
		}
		if err := json.Unmarshal([]byte(resp.GetControlPlane().GetIdentifier()), &cp); err != nil || cp.Component != "istiod" || cp.ID == "" || cp.Info.Version != version {
			t.Errorf("control plane %q, want istiod version %s: %v", resp.GetControlPlane().GetIdentifier(), version, err)
		}
		table := istioctl(t, bins, env, p, istiodNS, "proxy-status")
		t.Logf("istioctl proxy-status:\n%s", table)
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(proxy) + `\s+\S+\s+` + regexp.QuoteMeta(cp.ID) + `\s`)
		if !row.MatchString(table) {
			t.Errorf("the table has no row for %s served by %s", proxy, cp.ID)
		}
	})

	t.Run("a caller of another namespace sees its own namespace's proxies only", func(t *testing.T) {
		if cc := clientConfigOf(t, proxyStatusJSON(t, istioctl(t, bins, env, p, w.Namespace, "proxy-status", "-o", "json")), proxy); cc == nil {
			t.Errorf("a caller of %s does not see its own proxy %s", w.Namespace, proxy)
		}
		if resp := proxyStatusJSON(t, istioctl(t, bins, env, p, other, "proxy-status", "-o", "json")); len(resp.GetResources()) != 0 {
			t.Errorf("a caller of %s is shown %d proxies of other namespaces", other, len(resp.GetResources()))
		}
	})

	t.Run("proxy-status <pod> finds istiod's config equal to the Envoy's config dump", func(t *testing.T) {
		dump := filepath.Join(t.TempDir(), "config_dump.json")
		if err := os.WriteFile(dump, envoyConfigDump(t, a.waitState(t, envoyWait, configComplete)), 0o600); err != nil {
			t.Fatal(err)
		}
		out := istioctl(t, bins, env, p, istiodNS, "proxy-status", proxy, "--file", dump)
		for _, want := range []string{"Clusters Match", "Listeners Match", "Routes Match"} {
			if !strings.Contains(out, want) {
				t.Errorf("istioctl proxy-status %s: no %q:\n%s", proxy, want, out)
			}
		}
		// Another namespace's caller gets no config of the proxy.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bins.istioctl, "proxy-status", proxy, "--file", dump,
			"--kubeconfig", env.Kubeconfig, "--istioNamespace", other, "--xds-address", p.SecureGRPCAddr)
		cmd.Env = isolatedEnv()
		if out, err := cmd.CombinedOutput(); err == nil || strings.Contains(string(out), "Match") {
			t.Errorf("a caller of %s compared %s's config: %v\n%s", other, proxy, err, out)
		}
	})

	t.Run("x internal-debug config_dump shows the proxy's config to its own namespace, not to another", func(t *testing.T) {
		page := "config_dump?proxyID=" + proxy
		out := istioctl(t, bins, env, p, w.Namespace, "x", "internal-debug", page)
		dump := &adminv3.ConfigDump{}
		if err := protojson.Unmarshal([]byte(out), dump); err != nil {
			t.Fatalf("x internal-debug %s: %v\n%s", page, err, out)
		}
		listeners := &adminv3.ListenersConfigDump{}
		for _, a := range dump.GetConfigs() {
			if a.MessageIs(listeners) {
				if err := a.UnmarshalTo(listeners); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(dump.GetConfigs()) != 3 || len(listeners.GetDynamicListeners()) == 0 {
			t.Errorf("x internal-debug %s: %d sections, %d listeners", page, len(dump.GetConfigs()), len(listeners.GetDynamicListeners()))
		}
		if out := istioctl(t, bins, env, p, other, "x", "internal-debug", page); !strings.Contains(out, "Proxy not connected") || strings.Contains(out, "listener") {
			t.Errorf("a caller of %s asked %s's config dump:\n%s", other, proxy, out)
		}
	})

	t.Run("version shows istiod's version", func(t *testing.T) {
		// `istioctl version` port-forwards to istiod's pods (no kubelet
		// here); `istioctl x version` asks over xDS.
		out := istioctl(t, bins, env, p, istiodNS, "x", "version")
		if !strings.Contains(out, "control plane version: "+version) {
			t.Errorf("istioctl version does not show control plane version %s:\n%s", version, out)
		}
	})
}

func proxyStatusJSON(t *testing.T, out string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	resp := &discoveryv3.DiscoveryResponse{}
	if err := protojson.Unmarshal([]byte(out), resp); err != nil {
		t.Fatalf("proxy-status -o json: %v\n%s", err, out)
	}
	return resp
}

func clientConfigOf(t *testing.T, resp *discoveryv3.DiscoveryResponse, proxy string) *statusv3.ClientConfig {
	t.Helper()
	for _, r := range resp.GetResources() {
		cc := &statusv3.ClientConfig{}
		if err := r.UnmarshalTo(cc); err != nil {
			t.Fatal(err)
		}
		if cc.GetNode().GetId() == proxy {
			return cc
		}
	}
	return nil
}

// allSynced: CDS, LDS, EDS and RDS are all SYNCED.
func allSynced(cc *statusv3.ClientConfig) bool {
	synced := 0
	for _, x := range cc.GetGenericXdsConfigs() {
		if slices.Contains([]string{typeCluster, typeListener, typeEndpoint, typeRoute}, x.GetTypeUrl()) && x.GetConfigStatus() == statusv3.ConfigStatus_SYNCED {
			synced++
		}
	}
	return synced == 4
}

const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// envoyConfigDump is Envoy's /config_dump, as JSON, of what the stand-in
// holds: its dynamic clusters, listeners and routes.
func envoyConfigDump(t *testing.T, st *standinState) []byte {
	t.Helper()
	cfg := decodeStandin(t, st)
	toAny := func(m proto.Message) *anypb.Any {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	clusters := &adminv3.ClustersConfigDump{}
	for _, c := range cfg.clusters {
		clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters, &adminv3.ClustersConfigDump_DynamicCluster{Cluster: toAny(c)})
	}
	listeners := &adminv3.ListenersConfigDump{}
	for _, l := range cfg.listeners {
		listeners.DynamicListeners = append(listeners.DynamicListeners, &adminv3.ListenersConfigDump_DynamicListener{
			Name: l.GetName(), ActiveState: &adminv3.ListenersConfigDump_DynamicListenerState{Listener: toAny(l)},
		})
	}
	routes := &adminv3.RoutesConfigDump{}
	for _, r := range cfg.routes {
		routes.DynamicRouteConfigs = append(routes.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{RouteConfig: toAny(r)})
	}
	dump := &adminv3.ConfigDump{Configs: []*anypb.Any{toAny(clusters), toAny(listeners), toAny(routes)}}
	b, err := protojson.Marshal(dump)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The istioctl the tests run is built from the same istio.io/istio as the
// rest of this module.
func TestIstioctlModulePinsTheSameIstio(t *testing.T) {
	version := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^\s*istio\.io/istio (v\S+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s requires no istio.io/istio", path)
		}
		return string(m[1])
	}
	if a, b := version("go.mod"), version(filepath.Join("istioctl", "go.mod")); a != b {
		t.Errorf("go.mod requires istio.io/istio %s, istioctl/go.mod %s", a, b)
	}
}
