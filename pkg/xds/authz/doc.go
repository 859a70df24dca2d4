// Package authz translates Istio AuthorizationPolicies (security.istio.io/v1)
// into Envoy RBAC filters for both data planes Bulwark serves: Envoy
// sidecars (Flavor Envoy) and proxyless gRPC (Flavor GRPC). It is the one
// translation of the policy kind; Options select what differs.
//
// HTTPFilters and NetworkFilters return the filters for the policies that
// select a workload; Check returns what in those policies could not be
// translated as written, and how the filters failed closed on it.
//
// # Istio's behaviour
//
// For Envoy the output means what Istio's (pilot/pkg/security/authz) means:
//   - one filter per action present, in the order CUSTOM, AUDIT, DENY,
//     ALLOW, all named envoy.filters.http.rbac, or envoy.filters.network.rbac
//     with stat prefix "tcp." for a TCP chain, before tcp_proxy;
//   - RBAC policies named "ns[<namespace>]-policy[<name>]-rule[<index>]";
//     each `from` is a principal, each `to` a permission, and each `when`
//     condition joins the side it tests;
//   - an ALLOW policy that selects a workload denies what no ALLOW rule
//     allows: without rules, or with all its rules dropped, it denies
//     everything; a policy without rules matches nothing;
//   - values in Istio's forms: "*", a leading or trailing "*", exact
//     otherwise; hosts ignore case; paths may be templates ("{*}" one
//     segment, "{**}" any number); a principal of trust domain
//     "cluster.local" names the local trust domain;
//   - attributes only HTTP has (hosts, methods, paths, request.headers)
//     on a TCP chain: an ALLOW rule using one is dropped, a DENY or AUDIT
//     rule is kept without it (it matches more); never the reverse;
//   - AUDIT policies become a LOG filter, which never allows or denies;
//   - requestPrincipals, notRequestPrincipals and the request.auth.* `when`
//     keys match the payload jwt_authn leaves in dynamic metadata
//     (filter envoy.filters.http.jwt_authn, key "payload"): a principal
//     "<iss>/<sub>" split at its last "/" with Istio's wildcards on either
//     part; audiences (aud), presenter (azp) and claims[a][b]... (nested
//     objects, names taken as written, dots included) as a string or a
//     list member. A request without a token has no payload and matches
//     none of them, in ALLOW and DENY alike, as in Istio; HTTP only.
//
// The caller chooses the policies, as Istio does: those of the workload's
// namespace and of the root namespace whose selector matches its labels; a
// policy with a targetRef never applies to a workload.
//
// Regular expressions appear where Istio uses them and no plain matcher
// means the same (a namespace or trust domain with "*", service accounts,
// principals with a leading "*"); policy text reaches them only through
// regexp.QuoteMeta. A namespace without "*" is matched as contained text,
// which is what Istio's expression means.
//
// # Failing closed
//
// A part of a policy that cannot be translated as written fails closed,
// and Check reports it: a value or key that Istio's validation refuses,
// and what the data plane cannot evaluate (on proxyless gRPC, request
// authentication: requestPrincipals, notRequestPrincipals, request.auth.*
// keys, since gRPC has no jwt_authn filter).
//   - An ALLOW rule is dropped: it allows nothing.
//   - A DENY (or AUDIT) rule is kept without the offending condition, or
//     without the offending value of a not-list, so it matches more.
//   - CUSTOM policies (there is no external authorizer) and unknown
//     actions deny every request to the workload, on HTTP and TCP chains.
//
// One policy's problems never affect other policies or other rules.
//
// # Deliberate differences from Istio's Envoy output
//
//  1. A DENY condition on the peer's identity (principals, namespaces,
//     serviceAccounts, trustDomains and their `when` keys) also matches a
//     peer without an authenticated identity. In Istio a plaintext caller
//     (PERMISSIVE mode, or a TLS passthrough chain) matches no identity, so
//     such a rule does not deny it: a caller passes the DENY by presenting
//     no identity. Bulwark denies it.
//  2. Invalid policies: Istio's admission validation refuses them whole
//     and its generator, if one gets through, skips a rule with an unknown
//     `when` key (a DENY rule then denies nothing) and drops only the bad
//     value of a DENY list. Here a DENY rule leaves out the whole condition
//     (of a not-list, the bad value), and denies more; refused values (empty, bad CIDR or port, bad service
//     account or trust domain, braces outside a path template, a `when`
//     without values, serviceAccounts beside principals or namespaces, a
//     missing or empty source or operation) fail closed as above.
//  3. Path templates are checked as Envoy parses them, which also refuses
//     what Istio's validation lets through ("=" in a literal segment, no
//     leading "/"): Envoy would refuse the whole listener.
//  4. CUSTOM denies everything instead of asking an external authorizer;
//     Istio, lacking the provider, denies only what the CUSTOM rules match,
//     and skips HTTP providers on TCP chains.
//  5. No trust-domain aliases: Options has the local trust domain only.
//  6. A set of one matcher is not wrapped in an and/or set.
//
// Policies annotated istio.io/dry-run never reach this package: the model
// leaves them out, so, as in Istio, they are not enforced.
//
// # The GRPC flavor
//
// gRPC-Go evaluates a subset of RBAC, and grpcgen's servers have always
// received a subset of the translation; the GRPC flavor keeps that subset
// and is never looser than Istio's gRPC generator:
//   - two filters at most: envoy.filters.http.rbac.DENY, which also holds
//     the refusal of CUSTOM policies, then envoy.filters.http.rbac for
//     ALLOW (gRPC refuses two HTTP filters of one name); AUDIT policies are
//     reported and ignored, as gRPC ignores LOG;
//   - principals, namespaces, serviceAccounts, methods, paths (without
//     templates, which gRPC cannot match) and ports, with their not-forms,
//     are translated; every other field and every `when` key fails closed;
//   - namespaces and serviceAccounts match only SPIFFE IDs of
//     Options.TrustDomain where matching grants access (an ALLOW list, a
//     DENY not-list), as grpcgen always required; where matching denies,
//     they take Istio's any-trust-domain form, which denies more;
//   - principals are taken as written, as by Istio's gRPC generator:
//     "cluster.local" is not rewritten.
package authz
