package envoygen

import "github.com/bulwark-mesh/bulwark/pkg/model"

// Prepare builds now, in snap, what the sidecars generating from it
// share and would otherwise build at the first one's push: snap's
// indexes of DestinationRules and Sidecars (model.Snapshot.Index), the
// index of services by selector (the services a proxy serves), and each
// Sidecar's view in its own namespace. That is what Istio's push context
// holds before its first proxy's generation (its DestinationRule index,
// its Sidecars' SidecarScopes from initSidecarScopes, and, set when a
// proxy connects, the services it serves). A root-namespace Sidecar's
// view in the other namespaces is built at their first proxy's push, as
// Istio derives those scopes when first asked for. Calling Prepare is
// never needed: what it builds is built when first asked for otherwise.
func (g *Generator) Prepare(snap *model.Snapshot) {
	snap.Index()
	sharedSelectorIndex(snap)
	for _, sc := range snap.Sidecars() {
		sharedEgressScope(snap, sc, sc.Namespace, g.Mesh.Routes)
	}
}
