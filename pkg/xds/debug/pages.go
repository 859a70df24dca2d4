package debug

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

// TypeDebug is Istio's type for istiod's /debug pages over ADS, which
// `istioctl x internal-debug <page>` asks for: a request names one page,
// with its query ("syncz", "unsupported", "config_dump?proxyID=<pod>.<ns>"),
// and the response carries the page's body as the value of one resource
// of this type.
const TypeDebug = "istio.io/debug"

// The pages served over TypeDebug besides Pages.Extra.
const (
	pageList       = "list"        // the names of the pages, as JSON
	pageSyncz      = "syncz"       // Syncz, as /debug/syncz serves it
	pageConfigDump = "config_dump" // ?proxyID=: Envoy's admin ConfigDump of one proxy
)

// Limits of the debug pages: what a debug client names, and what a page
// may hold (a response must fit in one gRPC message).
const (
	maxDebugPageName  = 512
	maxDebugPageBytes = 32 << 20
)

// Bodies written as Istio's debug handlers write them: istioctl reads
// "404 page not found" as an unknown page (and asks for the list), and
// the other two as a proxy ID missing or not served here.
const (
	pageNotFound      = "404 page not found\n"
	pageNeedsProxyID  = "You must provide a proxyID in the query string\n"
	pageProxyNotFound = "Proxy not connected to this Pilot instance. It may be connected to another instance.\n"
)

// namespacePages are the pages a debug client of another namespace than
// istiod's or the mesh root's may read: each shows its own namespace's
// proxies only. Every other page is istiod's whole state, which the HTTP
// debug endpoints show to loopback callers only.
var namespacePages = map[string]bool{pageConfigDump: true}

var (
	errDebugPageTooLarge  = errors.New("debug page larger than the limit")
	errDebugPageForbidden = errors.New("debug page not served to this caller")
)

// Pages answers the requests of TypeDebug.
type Pages struct {
	// Extra are istiod's /debug pages, by name ("unsupported"), served
	// besides syncz and config_dump: to debug clients of istiod's
	// namespace or the mesh's root namespace only. Each is called with a
	// GET of /debug/<name>?<query> that carries no caller: the handlers
	// must not authorize by it.
	Extra map[string]http.Handler
	// Syncz is every connected proxy's sync status.
	Syncz func() []SyncStatus
	// ConfigDump is the configuration generated for the proxy named
	// proxyID if it is of namespace ("" for any), as Envoy's admin config
	// dump sections; nil when no such proxy is connected.
	ConfigDump func(proxyID, namespace string) []*anypb.Any
	Log        *slog.Logger
}

// CheckRequest admits a debug client's request for TypeDebug that is no
// ACK of the last response: one page that the caller c may read. An
// error ends the stream, as Istio's: InvalidArgument for a request that
// names no page or several, PermissionDenied for a page of istiod's
// whole state asked by a caller of another namespace.
func (pg *Pages) CheckRequest(names []string, c *Caller) error {
	if len(names) != 1 || len(names[0]) > maxDebugPageName {
		return status.Errorf(codes.InvalidArgument, "exactly one debug page of at most %d bytes is required", maxDebugPageName)
	}
	u, err := url.Parse(names[0])
	if err != nil {
		return status.Error(codes.InvalidArgument, "invalid debug page name")
	}
	if c.Namespace != "" && !namespacePages[u.Path] {
		pg.Log.Warn("debug page refused", "identity", c.Identity.String(), "page", u.Path)
		return status.Errorf(codes.PermissionDenied, "debug page %q is served to identities of istiod's namespace only", u.Path)
	}
	return nil
}

// Page is the resource that answers a request for the page named name
// (checked by CheckRequest) from c.
func (pg *Pages) Page(name string, c *Caller) []*anypb.Any {
	var body []byte
	u, err := url.Parse(name)
	if err == nil {
		body, err = pg.renderPage(u, c)
	}
	if err != nil {
		pg.Log.Warn("debug page failed", "page", name, "err", err)
		body = []byte("error: " + err.Error() + "\n")
	}
	return []*anypb.Any{{TypeUrl: TypeDebug, Value: body}}
}

func (pg *Pages) renderPage(u *url.URL, c *Caller) ([]byte, error) {
	if c.Namespace != "" && !namespacePages[u.Path] {
		return nil, errDebugPageForbidden // CheckRequest refused it already
	}
	switch u.Path {
	case pageList:
		return json.Marshal(pg.debugPageNames())
	case pageSyncz:
		return json.MarshalIndent(pg.Syncz(), "", "  ")
	case pageConfigDump:
		id := u.Query().Get("proxyID")
		if id == "" {
			return []byte(pageNeedsProxyID), nil
		}
		sections := pg.ConfigDump(id, c.Namespace)
		if sections == nil {
			return []byte(pageProxyNotFound), nil
		}
		return protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&admin.ConfigDump{Configs: sections})
	}
	h, ok := pg.Extra[u.Path]
	if !ok {
		return []byte(pageNotFound), nil
	}
	return servePage(h, u)
}

// debugPageNames are the pages served over TypeDebug, sorted, as Istio's
// /debug/list names them (without the list itself).
func (pg *Pages) debugPageNames() []string {
	names := slices.Collect(maps.Keys(pg.Extra))
	names = append(names, pageSyncz, pageConfigDump)
	slices.Sort(names)
	return slices.Compact(names)
}

// servePage runs h on a GET of /debug/<page>?<query> and returns the body
// it writes, whatever its status, as Istio's debug type does.
func servePage(h http.Handler, u *url.URL) ([]byte, error) {
	target := &url.URL{Path: "/debug/" + u.Path, RawQuery: u.RawQuery}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, err
	}
	w := &pageWriter{header: http.Header{}}
	h.ServeHTTP(w, req)
	if w.tooLarge {
		return nil, errDebugPageTooLarge
	}
	return w.body.Bytes(), nil
}

// pageWriter keeps what a debug page's handler writes, up to
// maxDebugPageBytes.
type pageWriter struct {
	header   http.Header
	body     bytes.Buffer
	tooLarge bool
}

func (w *pageWriter) Header() http.Header { return w.header }

func (w *pageWriter) WriteHeader(int) {}

func (w *pageWriter) Write(b []byte) (int, error) {
	if w.tooLarge || w.body.Len()+len(b) > maxDebugPageBytes {
		w.tooLarge = true
		return 0, errDebugPageTooLarge
	}
	return w.body.Write(b)
}
