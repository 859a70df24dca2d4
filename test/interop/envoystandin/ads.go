package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// The types Envoy asks of ADS, in the order it warms them.
const (
	typeCDS    = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEDS    = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeLDS    = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeRDS    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	typeSecret = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
)

var adsOrder = []string{typeCDS, typeEDS, typeLDS, typeRDS, typeSecret}

func shortType(url string) string {
	switch url {
	case typeCDS:
		return "CDS"
	case typeEDS:
		return "EDS"
	case typeLDS:
		return "LDS"
	case typeRDS:
		return "RDS"
	case typeSecret:
		return "SDS"
	}
	return url
}

// maxMessage bounds a response, as Envoy's default gRPC client does not,
// but a stand-in reading a local agent has no need to.
const maxMessage = 256 << 20

// xdsType is what the stand-in holds and asks for of one type.
type xdsType struct {
	url        string
	requested  bool
	wildcard   bool
	subscribed map[string]bool // EDS and RDS names
	answered   map[string]bool // subscribed names a response carried (or removed)
	held       map[string]*heldResource
}

type heldResource struct {
	version string
	msg     proto.Message
	deps    deps
	json    Held
}

// ads is the Delta ADS client: one stream at a time, reopened on error.
type ads struct {
	boot *bootInfo
	st   *store
	sds  *sdsClient
	log  *slog.Logger

	types            map[string]*xdsType
	cdsInit, ldsInit bool     // the first response of the type arrived
	initialClusters  []string // clusters the first CDS response left held
	initialListeners []string
	live             bool
}

func newADS(boot *bootInfo, st *store, sds *sdsClient, log *slog.Logger) *ads {
	a := &ads{boot: boot, st: st, sds: sds, log: log.With("stream", "ads"), types: map[string]*xdsType{}}
	for _, u := range adsOrder {
		a.types[u] = &xdsType{url: u, subscribed: map[string]bool{}, answered: map[string]bool{}, held: map[string]*heldResource{}}
	}
	a.types[typeCDS].wildcard, a.types[typeLDS].wildcard = true, true
	return a
}

func (a *ads) run(ctx context.Context) error {
	backoff := 200 * time.Millisecond
	for {
		start := time.Now()
		err := a.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 5*time.Second {
			backoff = 200 * time.Millisecond
		}
		a.log.Warn("ADS stream ended; reconnecting", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func dialPipe(path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}))
}

// adsStream is one open stream; send puts the node on its first request.
type adsStream struct {
	s        discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node     bool
	a        *ads
	onChange func() // SDS made progress
}

func (a *ads) stream(ctx context.Context) error {
	conn, err := dialPipe(a.boot.xdsPath)
	if err != nil {
		return fmt.Errorf("dial xds-grpc: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("open delta ADS: %w", err)
	}
	a.st.update(func(st *State) { st.ADSStreams++ })
	as := &adsStream{s: s, a: a}

	// The first request asks for every cluster; on a new stream after
	// the first, every type asked for before is asked again, with the
	// versions held.
	for _, u := range adsOrder {
		t := a.types[u]
		if u != typeCDS && !t.requested {
			continue
		}
		if !t.wildcard && len(t.subscribed) == 0 {
			continue // an empty first request would be a wildcard
		}
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: u, InitialResourceVersions: map[string]string{}}
		if !t.wildcard {
			req.ResourceNamesSubscribe = slices.Sorted(maps.Keys(t.subscribed))
		}
		for name, h := range t.held {
			req.InitialResourceVersions[name] = h.version
		}
		if err := as.send(req, "subscribe"); err != nil {
			return err
		}
		t.requested = true
	}

	responses := make(chan *discoveryv3.DeltaDiscoveryResponse)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case responses <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			return fmt.Errorf("receive: %w", err)
		case r := <-responses:
			if err := a.handle(as, r); err != nil {
				return err
			}
		case <-a.sds.changed:
			if err := a.advance(as); err != nil {
				return err
			}
		}
	}
}

func (as *adsStream) send(req *discoveryv3.DeltaDiscoveryRequest, what string) error {
	if !as.node {
		req.Node = as.a.boot.node
	}
	if err := as.s.Send(req); err != nil {
		return fmt.Errorf("send %s %s: %w", shortType(req.TypeUrl), what, err)
	}
	as.node = true
	e := Event{Sent: true, Stream: "ads", Type: shortType(req.TypeUrl), What: what, Nonce: req.ResponseNonce,
		Subscribe: req.ResourceNamesSubscribe, Unsubscribe: req.ResourceNamesUnsubscribe, Detail: req.GetErrorDetail().GetMessage()}
	if what == "subscribe" && len(req.ResourceNamesSubscribe) == 0 && len(req.ResourceNamesUnsubscribe) == 0 {
		e.Subscribe = []string{"*"}
	}
	as.a.st.update(func(s *State) {
		s.event(e)
		ts := s.typeStatus(req.TypeUrl)
		t := as.a.types[req.TypeUrl]
		ts.Requested, ts.Wildcard, ts.Subscribed = true, t.wildcard, slices.Sorted(maps.Keys(t.subscribed))
	})
	as.a.log.Info("sent", "type", e.Type, "what", what, "subscribe", len(req.ResourceNamesSubscribe),
		"unsubscribe", len(req.ResourceNamesUnsubscribe), "detail", e.Detail)
	return nil
}

func (s *State) typeStatus(url string) *TypeStatus {
	k := shortType(url)
	if s.XDS[k] == nil {
		s.XDS[k] = &TypeStatus{}
	}
	return s.XDS[k]
}

// handle checks a response, ACKs and applies it or NACKs it, then asks
// for what the change calls for.
func (a *ads) handle(as *adsStream, r *discoveryv3.DeltaDiscoveryResponse) error {
	t := a.types[r.GetTypeUrl()]
	names := make([]string, 0, len(r.GetResources()))
	for _, res := range r.GetResources() {
		names = append(names, res.GetName())
	}
	a.st.update(func(s *State) {
		s.event(Event{Stream: "ads", Type: shortType(r.GetTypeUrl()), What: "response", Nonce: r.GetNonce(),
			Resources: names, Removed: r.GetRemovedResources(), Detail: r.GetSystemVersionInfo()})
		ts := s.typeStatus(r.GetTypeUrl())
		ts.Responses++
		ts.LastNonce, ts.SystemVersion = r.GetNonce(), r.GetSystemVersionInfo()
	})
	a.log.Info("received", "type", shortType(r.GetTypeUrl()), "resources", len(names), "removed", len(r.GetRemovedResources()))
	if t == nil || !t.requested {
		a.st.update(func(s *State) { s.warn("response of a type not asked for: " + r.GetTypeUrl()) })
		return nil // Envoy ignores a type it does not watch
	}
	next, warnings, err := a.check(t, r)
	a.st.update(func(s *State) { s.warn(warnings...) })
	if err != nil {
		a.rejected(t)
		a.st.update(func(s *State) {
			ts := s.typeStatus(t.url)
			ts.NACKs++
			ts.LastNACK = err.Error()
		})
		a.log.Warn("rejecting", "type", shortType(t.url), "err", err)
		nack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t.url, ResponseNonce: r.GetNonce(),
			ErrorDetail: &rpcstatus.Status{Code: int32(codes.Internal), Message: err.Error()}}
		if err := as.send(nack, "nack"); err != nil {
			return err
		}
		return a.advance(as)
	}
	a.accepted(t, r, next)
	if err := as.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: t.url, ResponseNonce: r.GetNonce()}, "ack"); err != nil {
		return err
	}
	switch t.url {
	case typeCDS:
		if err := a.resubscribe(as, a.types[typeEDS], a.edsNames()); err != nil {
			return err
		}
	case typeLDS:
		if err := a.resubscribe(as, a.types[typeRDS], a.routeNames()); err != nil {
			return err
		}
	}
	if t.url == typeCDS || t.url == typeLDS {
		if err := a.resubscribe(as, a.types[typeSecret], a.adsSecretNames()); err != nil {
			return err
		}
	}
	a.sds.want(a.secretRefs())
	return a.advance(as)
}

// check decodes and checks a response against what would be held after
// it, and returns that.
func (a *ads) check(t *xdsType, r *discoveryv3.DeltaDiscoveryResponse) (map[string]*heldResource, []string, error) {
	next := maps.Clone(t.held)
	for _, name := range r.GetRemovedResources() {
		delete(next, name)
	}
	chk := &checker{boot: a.boot, clusters: func(name string) bool {
		return a.boot.staticClusters[name] || a.types[typeCDS].held[name] != nil
	}}
	var errs []error
	seen := map[string]bool{}
	for _, res := range r.GetResources() {
		name := res.GetName()
		if seen[name] {
			errs = append(errs, fmt.Errorf("duplicate resource '%s'", name))
			continue
		}
		seen[name] = true
		if res.GetResource().GetTypeUrl() != t.url {
			errs = append(errs, fmt.Errorf("resource '%s' of type %s in a %s response", name, res.GetResource().GetTypeUrl(), shortType(t.url)))
			continue
		}
		msg, err := res.GetResource().UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("resource '%s': %w", name, err))
			continue
		}
		if !t.wildcard && !t.subscribed[name] {
			chk.warnf("%s '%s' sent but not subscribed", shortType(t.url), name)
		}
		h := &heldResource{version: res.GetVersion(), msg: msg}
		err = a.checkOne(chk, t.url, name, h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		h.json = Held{Version: h.version, Resource: marshalJSON(withoutKey(msg))}
		next[name] = h
	}
	if len(errs) == 0 && t.url == typeLDS {
		errs = append(errs, duplicateAddresses(a.boot, next))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, chk.warnings, fmt.Errorf("%s update rejected: %s", shortType(t.url), strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return next, chk.warnings, nil
}
