package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

const (
	groupSecurity   = "security.istio.io"
	groupNetworking = "networking.istio.io"
	groupTelemetry  = "telemetry.istio.io"
)

// kind is one resource kind this webhook validates.
type kind struct {
	name string
	// newSpec returns an empty spec message to decode into.
	newSpec func() proto.Message
	// check validates the decoded spec under r; raw is the spec's JSON,
	// for the few checks protobuf cannot see (an explicitly empty list).
	check func(p *problems, r rules, meta *metav1.ObjectMeta, spec proto.Message, raw []byte)
}

// rules are the choices of istiod's operator that the checks follow, as
// istiod itself does.
type rules struct {
	// jwksURLs is what RequestAuthentication key sets may be fetched
	// from.
	jwksURLs keyfetch.URLRule
	// origination is what DestinationRules may originate TLS with.
	origination policy.OriginationOptions
}

// Every kind follows package policy's rules, which the generators and
// the problem log read too.
var kinds = map[string]kind{
	"PeerAuthentication": {
		name:    "PeerAuthentication",
		newSpec: func() proto.Message { return &security.PeerAuthentication{} },
		check: func(p *problems, _ rules, _ *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidatePeerAuthentication(m.(*security.PeerAuthentication)))
		},
	},
	"AuthorizationPolicy": {
		name:    "AuthorizationPolicy",
		newSpec: func() proto.Message { return &security.AuthorizationPolicy{} },
		check: func(p *problems, _ rules, meta *metav1.ObjectMeta, m proto.Message, raw []byte) {
			p.addFindings(policy.ValidateAuthorizationPolicy(meta.Annotations, m.(*security.AuthorizationPolicy), raw))
		},
	},
	"RequestAuthentication": {
		name:    "RequestAuthentication",
		newSpec: func() proto.Message { return &security.RequestAuthentication{} },
		check: func(p *problems, r rules, _ *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidateRequestAuthentication(m.(*security.RequestAuthentication), r.jwksURLs))
		},
	},
	"DestinationRule": {
		name:    "DestinationRule",
		newSpec: func() proto.Message { return &networking.DestinationRule{} },
		check: func(p *problems, r rules, meta *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidateDestinationRule(meta.Namespace, m.(*networking.DestinationRule), r.origination))
		},
	},
	"Gateway": {
		name:    "Gateway",
		newSpec: func() proto.Message { return &networking.Gateway{} },
		check: func(p *problems, _ rules, meta *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidateGateway(meta.Name, meta.Annotations, m.(*networking.Gateway)))
		},
	},
	"VirtualService": {
		name:    "VirtualService",
		newSpec: func() proto.Message { return &networking.VirtualService{} },
		check: func(p *problems, _ rules, meta *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidateVirtualService(meta.Namespace, meta.Annotations, m.(*networking.VirtualService)))
		},
	},
	"ServiceEntry": {
		name:    "ServiceEntry",
		newSpec: func() proto.Message { return &networking.ServiceEntry{} },
		check: func(p *problems, _ rules, meta *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidateServiceEntry(meta.Namespace, meta.Labels, m.(*networking.ServiceEntry)))
		},
	},
	"Telemetry": {
		name:    "Telemetry",
		newSpec: func() proto.Message { return &telemetry.Telemetry{} },
		check: func(p *problems, _ rules, _ *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidateTelemetry(m.(*telemetry.Telemetry)))
		},
	},
	"Sidecar": {
		name:    "Sidecar",
		newSpec: func() proto.Message { return &networking.Sidecar{} },
		check: func(p *problems, _ rules, meta *metav1.ObjectMeta, m proto.Message, _ []byte) {
			p.addFindings(policy.ValidateSidecar(meta.Namespace, m.(*networking.Sidecar)))
		},
	},
}

// networkingKinds are the kinds of networking.istio.io this webhook
// validates.
var networkingKinds = map[string]bool{"DestinationRule": true, "Gateway": true, "VirtualService": true, "ServiceEntry": true, "Sidecar": true}

// lookupKind reports whether group/version/kind is one this webhook
// validates.
func lookupKind(group, version, name string) (kind, bool) {
	k, ok := kinds[name]
	if !ok {
		return kind{}, false
	}
	switch {
	case name == "Telemetry":
		if group != groupTelemetry || (version != "v1" && version != "v1alpha1") {
			return kind{}, false
		}
	case group == groupSecurity && !networkingKinds[name] && (version == "v1" || version == "v1beta1"):
	case group == groupNetworking && networkingKinds[name] &&
		(version == "v1" || version == "v1beta1" || version == "v1alpha3"):
	default:
		return kind{}, false
	}
	return k, true
}

// object is the Kubernetes envelope of an Istio resource.
type object struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     json.RawMessage   `json:"spec"`
}

// validateObject decodes raw as an object of kind k and checks its spec
// under r. It returns the warnings of an object it admits, each naming
// the object.
func validateObject(k kind, raw []byte, r rules) ([]string, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: no object in the request", k.name)
	}
	var obj object
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("%s: decode object: %w", k.name, err)
	}
	ref := k.name + " " + objectRef(&obj.Metadata)
	spec := k.newSpec()
	rawSpec := bytes.TrimSpace(obj.Spec)
	if len(rawSpec) != 0 && !bytes.Equal(rawSpec, []byte("null")) {
		if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(rawSpec, spec); err != nil {
			return nil, fmt.Errorf("%s: spec: %s", ref, cleanProtoError(err))
		}
	} else {
		rawSpec = nil
	}
	var p problems
	k.check(&p, r, &obj.Metadata, spec, rawSpec)
	if err := p.err(); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	var warns []string
	for _, w := range p.warnings {
		warns = append(warns, ref+": "+w)
	}
	return warns, nil
}

func objectRef(m *metav1.ObjectMeta) string {
	name := m.Name
	if name == "" {
		name = m.GenerateName + "*"
	}
	if m.Namespace == "" {
		return name
	}
	return m.Namespace + "/" + name
}

// cleanProtoError drops protobuf's "proto:" prefix and the non-breaking
// spaces it puts in messages on purpose, so the reason reads plainly.
func cleanProtoError(err error) string {
	s := strings.ReplaceAll(err.Error(), "\u00a0", " ")
	s = strings.TrimPrefix(s, "proto: ")
	return strings.TrimPrefix(s, "proto:")
}

const maxProblems = 10

// problems collects the reasons an object is refused, each naming a field,
// and the warnings of one admitted.
type problems struct {
	list     []string
	more     int
	warnings []string
}

// addFindings adds what package policy found.
func (p *problems) addFindings(f policy.Findings) {
	for _, e := range f.Errors {
		if len(p.list) >= maxProblems {
			p.more++
			continue
		}
		p.list = append(p.list, e)
	}
	p.more += f.MoreErrors
	p.warnings = append(p.warnings, f.Warnings...)
	if f.MoreWarnings > 0 {
		p.warnings = append(p.warnings, fmt.Sprintf("and %d more warnings", f.MoreWarnings))
	}
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	msg := strings.Join(p.list, "; ")
	if p.more > 0 {
		msg += fmt.Sprintf("; and %d more", p.more)
	}
	return errors.New(msg)
}
