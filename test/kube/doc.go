// Package kube tests istiod's Kubernetes paths against a real
// kube-apiserver (internal/testenv): authentication of service-account
// tokens by TokenReview and by OIDC discovery, and istiod replicas sharing
// one CA through istio-ca-secret under the RBAC of docs/rbac.md.
package kube
