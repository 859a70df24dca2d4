package xds

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

func TestSynczAccess(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	tests := map[string]struct {
		remote, method string
		code           int
	}{
		"a loopback IPv4 caller is served":       {remote: "127.0.0.1:40000", method: http.MethodGet, code: http.StatusOK},
		"a loopback IPv6 caller is served":       {remote: "[::1]:40000", method: http.MethodGet, code: http.StatusOK},
		"a caller on the pod network is denied":  {remote: "10.0.0.7:40000", method: http.MethodGet, code: http.StatusForbidden},
		"an unparsable remote address is denied": {remote: "localhost", method: http.MethodGet, code: http.StatusForbidden},
		"a POST from loopback is not allowed":    {remote: "127.0.0.1:40000", method: http.MethodPost, code: http.StatusMethodNotAllowed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "/debug/syncz", nil)
			req.RemoteAddr = tc.remote
			rec := httptest.NewRecorder()
			h.srv.SynczHandler().ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
		})
	}
}

func TestSynczShowsAckAndNack(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	st := h.stream(clientID)
	send := func(req *discovery.DiscoveryRequest) {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}})
	lds := recv(t, st)
	send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener},
		VersionInfo: lds.GetVersionInfo(), ResponseNonce: lds.GetNonce()})
	send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ClusterType, ResourceNames: []string{echoCluster}})
	cds := recv(t, st)
	send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ClusterType, ResourceNames: []string{echoCluster},
		ResponseNonce: cds.GetNonce(), ErrorDetail: &status.Status{Message: "cluster rejected"}})

	var got []debug.SyncStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		req := httptest.NewRequest(http.MethodGet, "/debug/syncz", nil)
		req.RemoteAddr = "127.0.0.1:1234"
		rec := httptest.NewRecorder()
		h.srv.SynczHandler().ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("content type %q", ct)
		}
		got = nil
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("decode %s: %v", rec.Body, err)
		}
		if len(got) == 1 && got[0].Types[grpcgen.ClusterType].LastNACK != "" && got[0].Types[grpcgen.ListenerType].Acked != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("syncz never showed the ACK and the NACK: %s", rec.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := got[0]
	if !strings.HasPrefix(p.NodeID, "sidecar~") || p.Identity != clientID {
		t.Errorf("node %q identity %q, want a sidecar node as %s", p.NodeID, p.Identity, clientID)
	}
	l := p.Types[grpcgen.ListenerType]
	if l.Sent != lds.GetVersionInfo() || l.Acked != lds.GetVersionInfo() || l.LastNonce != lds.GetNonce() || l.LastNACK != "" {
		t.Errorf("listener %+v, want sent = acked = %s, nonce %s", l, lds.GetVersionInfo(), lds.GetNonce())
	}
	c := p.Types[grpcgen.ClusterType]
	if c.Sent != cds.GetVersionInfo() || c.Acked != "" || c.LastNACK != "cluster rejected" {
		t.Errorf("cluster %+v, want sent %s, not acked, NACK %q", c, cds.GetVersionInfo(), "cluster rejected")
	}
}
