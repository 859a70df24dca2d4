package model_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	securityv1 "istio.io/api/security/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

const diffBase = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  clusterIP: 10.96.0.10
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.11
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: app}
spec: {address: 10.0.0.5, labels: {app: echo}, serviceAccount: echo}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec: {mtls: {mode: STRICT}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: app}
spec:
  rules: [{from: [{source: {namespaces: [app]}}]}]
`

func TestDiffTellsWhatChanged(t *testing.T) {
	base := modeltest.Load(t, diffBase)
	for name, tc := range map[string]struct {
		old, new            string
		config, authz       bool
		services, endpoints []string
	}{
		"an endpoint moves":                    {old: "address: 10.0.0.5", new: "address: 10.0.0.6", endpoints: []string{"echo.app.svc.cluster.local"}},
		"an endpoint's service account":        {old: "serviceAccount: echo", new: "serviceAccount: other", endpoints: []string{"echo.app.svc.cluster.local"}},
		"a service's port":                     {old: "ports: [{name: http, port: 80}]", new: "ports: [{name: http, port: 81}]", services: []string{"web.app.svc.cluster.local"}},
		"a service's address":                  {old: "clusterIP: 10.96.0.11", new: "clusterIP: 10.96.0.12", services: []string{"web.app.svc.cluster.local"}},
		"a service renamed: one gone, one new": {old: "name: web,", new: "name: www,", services: []string{"web.app.svc.cluster.local", "www.app.svc.cluster.local"}},
		"an authorization policy":              {old: "namespaces: [app]", new: "namespaces: [other]", authz: true},
		"a peer authentication":                {old: "mode: STRICT", new: "mode: PERMISSIVE", config: true},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(diffBase, tc.old) {
				t.Fatalf("%q not in the manifests", tc.old)
			}
			d := model.Diff(base, modeltest.Load(t, strings.Replace(diffBase, tc.old, tc.new, 1)))
			if d.Config != tc.config || d.Authorization != tc.authz ||
				!slices.Equal(slices.Sorted(maps.Keys(d.Services)), tc.services) || !slices.Equal(slices.Sorted(maps.Keys(d.Endpoints)), tc.endpoints) {
				t.Errorf("got %+v", d)
			}
		})
	}
	if d := model.Diff(base, modeltest.Load(t, diffBase)); !d.None() {
		t.Errorf("the same manifests differ: %+v", d)
	}
}

// TestDiffScopesAuthorization: the scopes of an authorization change are
// where the changed policies apply, before and after, so that workloads
// none of them selects keep their authorization.
func TestDiffScopesAuthorization(t *testing.T) {
	ap := func(name, ns, app, allow string) *model.AuthorizationPolicy {
		return &model.AuthorizationPolicy{Meta: model.Meta{Name: name, Namespace: ns}, Spec: &securityv1.AuthorizationPolicy{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": app}},
			Rules:    []*securityv1.Rule{{From: []*securityv1.Rule_From{{Source: &securityv1.Source{Namespaces: []string{allow}}}}}},
		}}
	}
	kept := ap("kept", "b", "kept", "a")
	old := model.Build("1", model.Options{}, model.Resources{AuthorizationPolicies: []*model.AuthorizationPolicy{ap("edited", "a", "echo", "a"), kept, ap("gone", "c", "gone", "a")}})
	edited := ap("edited", "a", "echo", "b")
	edited.Spec.Selector.MatchLabels["app"] = "echo2"
	new := model.Build("2", model.Options{}, model.Resources{AuthorizationPolicies: []*model.AuthorizationPolicy{edited, kept}})
	c := model.Diff(old, new)
	if !c.Authorization {
		t.Fatal("no authorization change")
	}
	for _, tc := range []struct {
		ns, app string
		want    bool
	}{
		{"a", "echo", true}, {"a", "echo2", true}, {"c", "gone", true},
		{"b", "kept", false}, {"a", "other", false}, {"c", "echo", false},
	} {
		got := slices.ContainsFunc(c.AuthorizationScopes, func(s model.PolicyScope) bool {
			return s.Selects(model.DefaultRootNamespace, tc.ns, map[string]string{"app": tc.app})
		})
		if got != tc.want {
			t.Errorf("workload app=%s of %s: selected by the change %v, want %v", tc.app, tc.ns, got, tc.want)
		}
	}
}

// TestDiffOfSnapshotsBuiltOnTheLast: a snapshot built on the last one, as
// the Kubernetes source builds them, shares its ordering when the
// hostnames stay, and still tells each service apart: Diff, Service and
// Services answer as for snapshots built from nothing.
func TestDiffOfSnapshotsBuiltOnTheLast(t *testing.T) {
	base := modeltest.Load(t, diffBase)
	prev := model.BuildShared("1", model.Options{}, *base.Resources(), nil)
	moved := modeltest.Load(t, strings.Replace(diffBase, "address: 10.0.0.5", "address: 10.0.0.6", 1))
	renamed := modeltest.Load(t, strings.Replace(diffBase, "name: web,", "name: aaa,", 1))
	for name, fresh := range map[string]*model.Snapshot{"an endpoint moves": moved, "a service renamed": renamed} {
		t.Run(name, func(t *testing.T) {
			// the services that did not change stay the very same objects
			res := *fresh.Resources()
			res.Services = slices.Clone(res.Services)
			for i, svc := range res.Services {
				if old := prev.Service(svc.Hostname); old != nil && !model.Diff(prev, fresh).Endpoints[svc.Hostname] {
					res.Services[i] = old
				}
			}
			next := model.BuildShared("2", model.Options{}, res, prev)
			got, want := model.Diff(prev, next), model.Diff(base, fresh)
			if !maps.Equal(got.Services, want.Services) || !maps.Equal(got.Endpoints, want.Endpoints) {
				t.Errorf("built on the last: %+v; from nothing: %+v", got, want)
			}
			var hosts, wantHosts []string
			for _, svc := range next.Services() {
				hosts = append(hosts, svc.Hostname)
				if next.Service(svc.Hostname) != svc {
					t.Errorf("Service(%s) is not the listed service", svc.Hostname)
				}
			}
			for _, svc := range fresh.Services() {
				wantHosts = append(wantHosts, svc.Hostname)
			}
			if !slices.Equal(hosts, wantHosts) {
				t.Errorf("services %v, want %v", hosts, wantHosts)
			}
			if svc := next.Service("web.app.svc.cluster.local"); (svc != nil) != (name == "an endpoint moves") {
				t.Errorf("web: %v", svc)
			}
		})
	}
}
