// Package unsupported reports the Istio configuration Bulwark does not
// honour, so that moving from Istio loses nothing silently.
//
// A Reporter watches, read-only, the kinds package policy lists as not
// honoured or partly honoured: the Istio kinds Bulwark does not read
// (EnvoyFilter, Telemetry, VirtualService, …), the Gateway API kinds, and
// the kinds it reads with fields it ignores (a DestinationRule's
// loadBalancer, an AuthorizationPolicy's targetRef). A kind is watched only
// once the apiserver serves its CRD, at the version it prefers; those not
// served are looked for again every Config.Poll.
//
// For each object of which something is ignored it logs one line
// (Message: kind, namespace/name, what is ignored) when the object appears
// and each time its spec, or what is ignored of it, changes; a resync or a
// status write logs nothing. The gauge bulwark_unsupported_config{group,kind}
// counts them, and Report (istiod's /debug/unsupported) lists them.
//
// # The file model
//
// Files reports the same for the file model's directory (local mode, or
// --configDir): the fields ignored of the kinds the model reads. A kind it
// does not read makes the model refuse the whole directory, which the
// model logs.
//
// # Memory and pushes
//
// The informers keep a small record per object (name, namespace,
// generation, resource version, and what is ignored): objects of kinds not
// read at all are listed and watched by their metadata alone, and every
// record of such a kind shares one list of what is ignored; objects whose
// content matters are reduced to their record as they arrive. The reporter
// is not a source of the mesh model: nothing it watches causes an xDS push.
package unsupported
