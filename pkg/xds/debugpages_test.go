package xds

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// Istio's debug page bodies, which istioctl reads, and the bound on a
// page's name.
const (
	pageNotFound      = "404 page not found\n"
	pageNeedsProxyID  = "You must provide a proxyID in the query string\n"
	pageProxyNotFound = "Proxy not connected to this Pilot instance. It may be connected to another instance.\n"
	maxDebugPageName  = 512
)

const (
	systemCaller = "spiffe://cluster.local/ns/istio-system/sa/default"
	appCaller    = "spiffe://cluster.local/ns/app/sa/admin"
	otherCaller  = "spiffe://cluster.local/ns/other/sa/default"
)

// debugPageHarness serves an "unsupported" page whose body names the
// path and query it was asked, and counts its calls; a proxy of
// namespace app, "synced.app", holds the echo listener.
func debugPageHarness(t *testing.T) (*harness, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.RemoteAddr != "" {
			t.Errorf("the page was called with a remote address %q", r.RemoteAddr)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "query": r.URL.RawQuery})
	})
	h := newTLSHarness(t, modeltest.Load(t, baseManifests), func(c *Config) {
		c.SystemNamespace = "istio-system"
		c.ControlPlane = debug.ControlPlane{ID: "istiod-abc", Version: "1.2.3"}
		c.DebugPages = map[string]http.Handler{"unsupported": page}
	})
	st := h.stream(clientID)
	node := testNode("app", "client", nil)
	node.Id = "sidecar~10.0.0.1~synced.app~app.svc.cluster.local"
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	recv(t, st)
	return h, &calls
}

// pageBody is the one istio.io/debug resource of r.
func pageBody(t *testing.T, r *discovery.DiscoveryResponse) string {
	t.Helper()
	if r.GetTypeUrl() != debug.TypeDebug || len(r.GetResources()) != 1 || r.GetResources()[0].GetTypeUrl() != debug.TypeDebug {
		t.Fatalf("response of type %s with %d resources, want one %s", r.GetTypeUrl(), len(r.GetResources()), debug.TypeDebug)
	}
	if r.GetControlPlane().GetIdentifier() == "" {
		t.Errorf("a debug page without istiod's identifier")
	}
	return string(r.GetResources()[0].GetValue())
}

// askErr sends one request for names on a new stream as identity id and
// returns the error that ends the stream, nil if a response came.
func askErr(h *harness, id string, names ...string) error {
	h.t.Helper()
	st := h.stream(id)
	if err := st.Send(&discovery.DiscoveryRequest{Node: debugNode("istio-system"), TypeUrl: debug.TypeDebug, ResourceNames: names, ResponseNonce: "made-up"}); err != nil {
		h.t.Fatal(err)
	}
	_, err := st.Recv()
	return err
}

// istioctl's `x internal-debug <page>`: a caller of istiod's namespace
// reads every /debug page, through the handlers
// the HTTP endpoints use; unknown pages answer as Istio's do, so istioctl
// shows the list.
func TestDebugPagesForIstiodsNamespace(t *testing.T) {
	h, calls := debugPageHarness(t)

	got := pageBody(t, debugAsk(h, systemCaller, debug.TypeDebug, "unsupported?kind=EnvoyFilter"))
	var asked map[string]string
	if err := json.Unmarshal([]byte(got), &asked); err != nil || asked["path"] != "/debug/unsupported" || asked["query"] != "kind=EnvoyFilter" {
		t.Errorf("unsupported: the page was asked %v (%v), want /debug/unsupported?kind=EnvoyFilter", asked, err)
	}

	var syncz []debug.SyncStatus
	if err := json.Unmarshal([]byte(pageBody(t, debugAsk(h, systemCaller, debug.TypeDebug, "syncz"))), &syncz); err != nil {
		t.Fatal(err)
	}
	if len(syncz) != 1 || !strings.Contains(syncz[0].NodeID, "synced.app") || syncz[0].Types[grpcgen.ListenerType].Sent == "" {
		t.Errorf("syncz: %+v, want synced.app with its listeners sent", syncz)
	}

	var list []string
	if err := json.Unmarshal([]byte(pageBody(t, debugAsk(h, systemCaller, debug.TypeDebug, "list"))), &list); err != nil {
		t.Fatal(err)
	}
	if want := []string{"config_dump", "syncz", "unsupported"}; !slices.Equal(list, want) {
		t.Errorf("list %v, want %v", list, want)
	}

	if got := pageBody(t, debugAsk(h, systemCaller, debug.TypeDebug, "pprof/heap")); got != pageNotFound {
		t.Errorf("an unknown page: %q, want %q", got, pageNotFound)
	}
	if got := pageBody(t, debugAsk(h, systemCaller, debug.TypeDebug, "config_dump")); got != pageNeedsProxyID {
		t.Errorf("config_dump without a proxy: %q", got)
	}

	if n := calls.Load(); n != 1 {
		t.Errorf("the page handler was called %d times, want once", n)
	}
}

// A caller of another namespace reads config_dump of its own namespace's
// proxies only, and no page of istiod's whole state: the stream ends with
// PermissionDenied before any page is made.
func TestDebugPagesForOtherNamespaces(t *testing.T) {
	h, calls := debugPageHarness(t)

	body := pageBody(t, debugAsk(h, appCaller, debug.TypeDebug, "config_dump?proxyID=synced.app"))
	var dump admin.ConfigDump
	if err := protojson.Unmarshal([]byte(body), &dump); err != nil {
		t.Fatalf("config_dump: %v\n%s", err, body)
	}
	var listeners admin.ListenersConfigDump
	for _, a := range dump.GetConfigs() {
		if a.MessageIs(&listeners) {
			if err := a.UnmarshalTo(&listeners); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(dump.GetConfigs()) != 3 || len(listeners.GetDynamicListeners()) != 1 || listeners.GetDynamicListeners()[0].GetName() != echoListener {
		t.Errorf("config_dump of synced.app: %d sections, listeners %v", len(dump.GetConfigs()), listeners.GetDynamicListeners())
	}
	// Another namespace's proxy is answered as one not connected here:
	// the caller does not learn whether it exists.
	if got := pageBody(t, debugAsk(h, otherCaller, debug.TypeDebug, "config_dump?proxyID=synced.app")); got != pageProxyNotFound {
		t.Errorf("namespace other asking synced.app's config dump: %q", got)
	}

	for _, page := range []string{"unsupported", "syncz", "list", "nosuchpage", "unsupported/../config_dump"} {
		if err := askErr(h, appCaller, page); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s asked by namespace app: %v, want PermissionDenied", page, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the page handler was called %d times for callers of other namespaces", n)
	}
}

// What a debug client names is bounded: one page, of limited length.
func TestDebugPageRequestsAreBounded(t *testing.T) {
	h, _ := debugPageHarness(t)
	for name, names := range map[string][]string{
		"no page":        nil,
		"two pages":      {"syncz", "unsupported"},
		"a long name":    {"syncz?" + strings.Repeat("a", maxDebugPageName)},
		"an invalid URL": {"syncz%zz"},
	} {
		if err := askErr(h, systemCaller, names...); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

// The ACK of a page (istioctl's ADS client sends one) is no question:
// it neither ends the stream nor asks the page again.
func TestDebugPageACKIsNoQuestion(t *testing.T) {
	h, calls := debugPageHarness(t)
	st := h.stream(systemCaller)
	if err := st.Send(&discovery.DiscoveryRequest{Node: debugNode("istio-system"), TypeUrl: debug.TypeDebug, ResourceNames: []string{"unsupported"}, ResponseNonce: "made-up"}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	pageBody(t, r)
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: debug.TypeDebug, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo()}); err != nil {
		t.Fatal(err)
	}
	// The next question on the same stream is answered.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: debug.TypeDebugSyncz}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, st); r.GetTypeUrl() != debug.TypeDebugSyncz {
		t.Errorf("after the ACK: a %s response", r.GetTypeUrl())
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the page was made %d times, want once", n)
	}
}
