// Package policy says, in one place, which kinds of Istio and of the
// Kubernetes Gateway API Bulwark honours, and what it ignores of an object
// of each: the unsupported-config reporter (pkg/unsupported) reports what
// it says, the validating webhook warns with it, and a test keeps the
// README's compatibility table equal to it.
//
// It also holds the rules of validity of Gateway and VirtualService
// (ValidateGateway, ValidateVirtualService, CheckRegex), ServiceEntry
// (ValidateServiceEntry) and Telemetry (ValidateTelemetry, CheckCEL),
// Istio's rules with bounds on hostile input: the validating webhook
// refuses by them and the generators skip what they refuse.
//
// And the rules of the security kinds and of TLS origination, written
// once for the webhook, the generators and the problem log alike:
// PeerAuthentication (ValidatePeerAuthentication), AuthorizationPolicy
// (ValidateAuthorizationPolicy; the values and `when` keys a rule may
// match, CheckRuleValue and CheckConditionKey, on which pkg/xds/authz
// fails closed), RequestAuthentication (ValidateRequestAuthentication;
// where a key set comes from, CheckJWTKeySource, by which pkg/xds/reqauthn
// refuses an issuer's tokens) and DestinationRule
// (ValidateDestinationRule; SIMPLE and MUTUAL TLS, CheckOriginationFor and
// OriginationProblems, by which the Envoy generator gives a cluster no
// endpoints and the problem log reports it). What only admission refuses
// (forms stricter than Istio's, listed in pkg/inject/validate) is marked
// apart, so the generators still translate as Istio does.
//
// A kind is honoured (every field read, or refused failing closed), partly
// honoured (some fields read, the others reported per object by their
// path), or not honoured (nothing read: every object reported whole).
// Fields are judged by the list of those read, so a field Istio adds later
// is reported as ignored until Bulwark reads it.
package policy
