// Package validate is istiod's /validate admission webhook for the security
// resources Bulwark reads: PeerAuthentication, AuthorizationPolicy and
// RequestAuthentication (security.istio.io v1 and v1beta1), DestinationRule,
// Gateway and VirtualService (networking.istio.io v1, v1beta1 and
// v1alpha3). Every rule is package policy's (ValidatePeerAuthentication,
// ValidateAuthorizationPolicy, ValidateRequestAuthentication,
// ValidateDestinationRule, ValidateGateway, ValidateVirtualService, ...),
// which the generators and the problem log read too: what a generator
// refuses, failing closed, this webhook refuses at admission. Warnings,
// Istio's, are admission warnings.
//
// The when key source.trustDomain is admitted, as Istio admits it; the
// key request.experimental.inline.headers, which Istio does not know, is
// refused.
//
// A spec is decoded strictly into the istio.io/api messages (an unknown
// field is refused) and then checked field by field. A refusal names the
// field, for example
//
//	AuthorizationPolicy ns/deny-all: spec.rules[0].from[0].source.principals[1]: ...
//
// DELETE and CONNECT operations, writes to subresources (status), other
// kinds and other versions are allowed without looking at them. The HTTP handling (POST only, application/json
// only, a bounded body, malformed reviews answered 400, panics recovered)
// is the same as the /inject webhook's.
//
// # What follows Istio
//
// The checks follow istiod's own validation of these kinds: workload
// selectors without an empty key; at most one of selector, targetRef and
// targetRefs; PeerAuthentication portLevelMtls only with a non-empty
// selector and ports 1–65535; AuthorizationPolicy CUSTOM only with
// provider.name and rules, provider only with CUSTOM, the source fields and
// when keys CUSTOM cannot use, DENY and CUSTOM without rules refused,
// `from`/`to` lists that are empty or hold an empty source/operation
// refused, when keys from Istio's attribute set with their value checks,
// IP blocks as addresses or CIDRs, path templates ({*} and {**}, {**}
// last); RequestAuthentication issuer required and no empty audience,
// header, parameter or cookie names, outputClaimToHeaders with valid header
// names, timeouts of at least 1ms in whole milliseconds; DestinationRule
// host a (wildcard) DNS name, a trafficPolicy or portLevelSettings entry
// with at least one field and a port, the client TLS rules (credentialName
// excludes file certificates; MUTUAL without credentialName needs a client
// certificate and key; insecureSkipVerify excludes CA settings), unique
// DNS-label subset names.
//
// A DENY policy whose rule is empty (`rules: [{}]`) matches every request
// and so denies everything in its scope. Istio accepts it as the way to say
// "deny all", and so does this webhook.
//
// # Deliberate differences (stricter than Istio)
//
//   - Selector keys and values must be valid Kubernetes label keys and
//     values; Istio only refuses an empty key and `*`.
//   - principals and notPrincipals must be `<trust-domain>/ns/<ns>/sa/<sa>`
//     or `*`, where a `*` may replace whole leading segments (`*/ns/foo/sa/bar`)
//     or whole trailing segments (`cluster.local/ns/foo/*`). Istio accepts any
//     non-empty string and treats a leading or trailing `*` as a
//     suffix/prefix match, so `cluster.local/ns/foo/sa/app-*` or
//     `spiffe://cluster.local/...` (which never matches) pass there.
//   - ports, notPorts and destination.port values must be 1–65535; Istio
//     also accepts 0, which matches nothing.
//   - methods must be HTTP tokens, and namespaces and notNamespaces
//     namespace names (optionally with a leading or trailing `*`); Istio
//     only refuses empty strings.
//   - Where a rule's key set is fetched from must be a URL istiod fetches
//     key sets from (keyfetch.URLRule.CheckSource, the rule the generator
//     applies): its jwksUri, or, without jwks or jwksUri, its issuer's
//     OIDC discovery document, must be https (plain http to a loopback
//     host only where istiod runs with --allow-loopback-http-jwks), with
//     a host, a port in 1-65535 if any, and no user info, query or
//     fragment. Istio also accepts http anywhere, queries, and issuers
//     that are not URLs without a key source (whose tokens it then
//     refuses). jwks and jwksUri may not both be set (Istio lets jwks
//     win), and jwks must be a JSON object with a "keys" array (Istio
//     parses the keys).
//   - A null rule, jwtRule or portLevelMtls value is refused rather than
//     skipped.
//   - What the generators cannot apply as written, and would fail closed
//     on, is refused (policy.CheckRuleValue, policy.CheckConditionKey,
//     policy.CheckJWTKeySource, policy.OriginationProblems): a path
//     template not led by "/", or with a literal Envoy's template matcher
//     refuses ("=", which Istio allows), or longer than 256 bytes; "{"
//     or "}" outside {*} and {**}; a trust domain with a "/" or a "*"
//     inside it; an IP address with a zone; a claim name that is empty or
//     holds a bracket, or claims nested more than 16 deep; a header name
//     with a control character; inline jwks without a usable public
//     signing key; a DestinationRule whose SIMPLE or MUTUAL TLS the
//     generators refuse for every client it reaches (insecureSkipVerify
//     where istiod runs without --allow-insecure-skip-verify, a
//     credentialName in a rule without a workloadSelector or naming a
//     Secret by namespace or URL, MUTUAL without a client certificate, a
//     file path holding "~"). Istio admits these and then sends
//     plaintext, matches nothing, or logs an error.
//   - credentialName is refused unless tls.mode is SIMPLE or MUTUAL; Istio
//     ignores it for DISABLE and ISTIO_MUTUAL.
//   - Enum fields must hold a defined value; protojson accepts any number.
//   - A regex (VirtualService matches, allowOrigins, uriRegexRewrite) must
//     compile, as RE2, to a program of at most 16384 instructions, half
//     the re2.max_program_size.error_level of the bootstrap pilot-agent
//     gives Envoy (Go and RE2 count instructions differently); Istio
//     checks only its length (1024).
//   - A Gateway holds at most 1024 servers, a server and a VirtualService at
//     most 1024 hosts, a VirtualService at most 4096 routes and a route 4096
//     matches; Istio sets no bound.
//   - A server's caCrl beside a credentialName is refused: the CRL must be
//     in the Secret, and Istio ignores the file without a word.
//   - Every gateway reference of a VirtualService is checked; Istio stops
//     at the first that has no "/" (such as "mesh").
//   - The annotations internal.istio.io/gateway-semantics and
//     internal.istio.io/route-semantics relax no rule (Gateway names,
//     gateway references, destinations), as they do in Istio, where only
//     istiod's own translation of Gateway API objects sets them.
//   - A ServiceEntry endpoint at a unix domain socket ("unix://…") is
//     refused: Bulwark does not serve one. A ServiceEntry holds at most
//     256 addresses, 256 ports, 4096 endpoints and 1024 hosts; Istio sets
//     no bound.
//   - A Sidecar holds at most 128 egress and 128 ingress listeners and
//     1024 egress hosts in all; Istio sets no bound. Its connection pool
//     settings are checked as Istio checks them but for TCP keepalive
//     probes, which no rule reads. An outboundTrafficPolicy mode of a
//     number Istio names no mode for is refused (Istio reads it as
//     ALLOW_ANY).
//
// # Warnings
//
// Every Istio object the webhook admits is answered with warnings naming
// what Bulwark ignores of it, as package policy says (the reporter of
// pkg/unsupported reports the same at runtime): the whole object of a kind
// it does not read (EnvoyFilter, VirtualService, Telemetry, …), a
// DestinationRule's fields other than its TLS and subsets, a policy
// attached by targetRef. At most 10 per object. Warnings never refuse.
//
// Load balancer, connection pool and outlier detection settings of a
// DestinationRule are decoded strictly but their values are not checked:
// they do not affect security, and Envoy's own validation refuses bad ones.
package validate
