package routes

import (
	"errors"
	"fmt"
	"unicode/utf8"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// form is what a translation is made into.
type form uint8

const (
	messages        form = iota // the route messages
	messagesAndWire             // the messages and their wire form
	wireForm                    // the wire form, written straight where wireTranslate can
)

// builtRoute is one route of a translation: its message (nil when
// written straight to wire form), its wire form (nil when not made, or
// it does not encode) and whether it matches every request.
type builtRoute struct {
	msg      *routev3.Route
	raw      []byte
	catchAll bool
}

// buildRoutes translates vs in scope into form f, noting what it reads
// in the entry when note. In wireForm, routes that do not encode refuse
// vs whole, as routes Envoy would refuse do; in messagesAndWire, they
// are kept without their wire form (encoding the route configuration
// then reports the error).
func (o Options) buildRoutes(snap *model.Snapshot, vs *model.VirtualService, scope Scope, rs *regexes, f form, note bool) *memoEntry {
	e := &memoEntry{}
	var deps *reads
	if note {
		deps = &e.deps
	}
	if f == wireForm {
		if built, ok := o.wireTranslate(snap, vs, scope, rs, deps); ok {
			e.built = built
			e.raw = make([][]byte, len(built))
			for i, r := range built {
				e.raw[i] = r.raw
			}
			return e
		}
	}
	e.routes, e.err = o.translate(snap, vs, scope, rs, deps)
	if e.err != nil {
		return e
	}
	e.built = make([]builtRoute, len(e.routes))
	for i, r := range e.routes {
		e.built[i] = builtRoute{msg: r, catchAll: isCatchAll(r)}
	}
	if f == messages {
		return e
	}
	raw, err := MarshalRoutes(e.routes)
	switch {
	case err == nil:
		e.raw = raw
		for i := range e.built {
			e.built[i].raw = raw[i]
		}
	case f == wireForm:
		e.routes, e.built, e.err = nil, nil, fmt.Errorf("its routes do not encode: %w", err)
	default:
		e.raw = make([][]byte, len(e.routes))
	}
	return e
}

// WireVirtualHost is a virtual host of a route configuration, its
// routes in wire form.
type WireVirtualHost struct {
	Name    string
	Domains []string
	// Routes are each route's wire form, as MarshalRoute writes it, in
	// order.
	Routes                     [][]byte
	RequireTLS                 bool // require_tls ALL
	IncludeRequestAttemptCount bool
}

// WireVirtualHosts is MemoVirtualHosts with the routes in wire form:
// the routes of most VirtualServices are written straight to it, never
// built as messages; the others are translated and encoded, and a
// VirtualService whose routes do not encode is left out and reported,
// as one Envoy would refuse. The virtual hosts' wire form through
// AppendWireVirtualHost is deterministic marshalling's of
// MemoVirtualHosts' virtual hosts. What it returns is shared: not to be
// changed.
func (o Options) WireVirtualHosts(m *Memo, snap *model.Snapshot, servers []BoundServer, proxy Proxy) ([]WireVirtualHost, []Problem) {
	hosts, problems := o.virtualHosts(m, snap, servers, proxy, wireForm)
	out := make([]WireVirtualHost, len(hosts))
	for i, h := range hosts {
		vh := WireVirtualHost{Name: h.name, Domains: h.domains, Routes: make([][]byte, 0, len(h.routes)), RequireTLS: h.tls, IncludeRequestAttemptCount: h.attempts}
		for r := range catchAllLast(h.routes) {
			vh.Routes = append(vh.Routes, r.raw)
		}
		out[i] = vh
	}
	return out, problems
}

// Field numbers of envoy.config.route.v3.VirtualHost.
const (
	vhName                       = 1
	vhDomains                    = 2
	vhRoutes                     = 3
	vhRequireTLS                 = 4
	vhIncludeRequestAttemptCount = 14
)

// Size is the length of vh's wire form, without its tag and length.
func (vh *WireVirtualHost) Size() int {
	n := 0
	if vh.Name != "" {
		n += protowire.SizeTag(vhName) + protowire.SizeBytes(len(vh.Name))
	}
	for _, d := range vh.Domains {
		n += protowire.SizeTag(vhDomains) + protowire.SizeBytes(len(d))
	}
	for _, r := range vh.Routes {
		n += protowire.SizeTag(vhRoutes) + protowire.SizeBytes(len(r))
	}
	if vh.RequireTLS {
		n += protowire.SizeTag(vhRequireTLS) + 1
	}
	if vh.IncludeRequestAttemptCount {
		n += protowire.SizeTag(vhIncludeRequestAttemptCount) + 1
	}
	return n
}

var errNoRoute = errors.New("a route without its wire form")

// AppendWireVirtualHost appends to b the field num holding vh, as
// deterministic marshalling writes a VirtualHost of those fields.
func AppendWireVirtualHost(b []byte, num protowire.Number, vh *WireVirtualHost) ([]byte, error) {
	if !utf8.ValidString(vh.Name) {
		return nil, fmt.Errorf("virtual host name: %w", errUTF8)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(vh.Size()))
	if vh.Name != "" {
		b = protowire.AppendTag(b, vhName, protowire.BytesType)
		b = protowire.AppendString(b, vh.Name)
	}
	for _, d := range vh.Domains {
		if !utf8.ValidString(d) {
			return nil, fmt.Errorf("virtual host %s: domain: %w", vh.Name, errUTF8)
		}
		b = protowire.AppendTag(b, vhDomains, protowire.BytesType)
		b = protowire.AppendString(b, d)
	}
	for _, r := range vh.Routes {
		if r == nil {
			return nil, fmt.Errorf("virtual host %s: %w", vh.Name, errNoRoute)
		}
		b = protowire.AppendTag(b, vhRoutes, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
	}
	if vh.RequireTLS {
		b = protowire.AppendTag(b, vhRequireTLS, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(routev3.VirtualHost_ALL))
	}
	if vh.IncludeRequestAttemptCount {
		b = protowire.AppendTag(b, vhIncludeRequestAttemptCount, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b, nil
}
