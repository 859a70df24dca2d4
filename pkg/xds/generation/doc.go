// Package generation is what a push generates with: one mesh
// configuration (Istio's MeshConfig, with the RequestAuthentication key
// sets fetched for it) turned into the Envoy and proxyless gRPC
// generators (Mesh), and the scope a proxy's workload gets from them
// (Mesh.Scope): the key under which proxies share resources, and the
// function that generates them.
//
// It is apart from the ADS server because it reads no stream: the
// server holds one Mesh per push state and asks it, per proxy, what to
// generate; what the generators themselves do is packages envoygen and
// grpcgen's.
package generation
