// Package kube tests istiod's Kubernetes paths against a real
// kube-apiserver (internal/testenv): authentication of service-account
// tokens by TokenReview and by OIDC discovery, istiod replicas sharing one
// CA through istio-ca-secret, and xDS from the API server (the mesh model,
// and gateway credentialName Secrets over SDS), all under the RBAC of
// docs/rbac.md, which is the chart's.
package kube
