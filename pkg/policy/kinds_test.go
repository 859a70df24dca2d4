package policy

import (
	"encoding/json"
	"slices"
	"testing"
)

func spec(t *testing.T, js string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustLookup(t *testing.T, group, name string) Kind {
	t.Helper()
	k, ok := Lookup(group, name)
	if !ok {
		t.Fatalf("no kind %s.%s", name, group)
	}
	return k
}

func TestIgnoredFields(t *testing.T) {
	for name, tc := range map[string]struct {
		group, kind string
		annotations map[string]string
		spec        string
		want        []string
	}{
		"an Ingress of class istio is reported whole": {
			group: groupIngress, kind: "Ingress",
			spec: `{"ingressClassName":"istio","rules":[{"host":"a.example"}]}`,
			want: []string{ingressNotServed},
		},
		"an Ingress of class istio by its annotation too": {
			group: groupIngress, kind: "Ingress", annotations: map[string]string{"kubernetes.io/ingress.class": "istio"},
			spec: `{"rules":[{"host":"a.example"}]}`,
			want: []string{ingressNotServed},
		},
		"an Ingress of another class is not Istio's": {
			group: groupIngress, kind: "Ingress", annotations: map[string]string{"kubernetes.io/ingress.class": "nginx"},
			spec: `{"ingressClassName":"nginx"}`,
		},
		"an IngressClass of Istio's controller is reported": {
			group: groupIngress, kind: "IngressClass",
			spec: `{"controller":"istio.io/ingress-controller"}`,
			want: []string{ingressNotServed},
		},
		"an IngressClass of another controller is not": {
			group: groupIngress, kind: "IngressClass",
			spec: `{"controller":"k8s.io/ingress-nginx"}`,
		},
		"a DestinationRule of TLS and subsets is honoured whole": {
			group: groupNetworking, kind: "DestinationRule",
			spec: `{"host":"a","workloadSelector":{"matchLabels":{"app":"a"}},"trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"},
				"portLevelSettings":[{"port":{"number":80},"tls":{"mode":"DISABLE"}}]},
				"subsets":[{"name":"v1","labels":{"v":"1"},"trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"}}}]}`,
		},
		"load balancing, pools and outlier detection are reported by path": {
			group: groupNetworking, kind: "DestinationRule",
			spec: `{"host":"*.a.svc.cluster.local","exportTo":["."],"trafficPolicy":{"loadBalancer":{"simple":"LEAST_REQUEST"},"outlierDetection":{},
				"portLevelSettings":[{"port":{"number":80},"connectionPool":{}}]},
				"subsets":[{"name":"v1","trafficPolicy":{"tunnel":{}}}]}`,
			want: []string{
				"spec.trafficPolicy.loadBalancer: ignored, not generated",
				"spec.trafficPolicy.outlierDetection: ignored, not generated",
				"spec.trafficPolicy.portLevelSettings[0].connectionPool: applied by Envoy proxies only, not by proxyless gRPC clients",
				"spec.subsets[0].trafficPolicy.tunnel: ignored, not generated",
			},
		},
		"a ServiceEntry of every read field is honoured whole": {
			group: groupNetworking, kind: "ServiceEntry",
			spec: `{"hosts":["a.example.com"],"addresses":["240.0.0.1","240.0.0.2/32"],"location":"MESH_INTERNAL","resolution":"STATIC",
				"ports":[{"number":80,"name":"http","protocol":"HTTP","targetPort":8080}],"subjectAltNames":["spiffe://td/ns/a/sa/b"],
				"endpoints":[{"address":"10.0.0.1","ports":{"http":9080},"labels":{"a":"b"},"locality":"r/z","weight":2,"serviceAccount":"b"}]}`,
		},
		"what a ServiceEntry does not serve is reported by path": {
			group: groupNetworking, kind: "ServiceEntry",
			spec: `{"hosts":["*.example.com"],"addresses":["10.0.0.0/16"],"resolution":"DYNAMIC_DNS","exportTo":["."],
				"ports":[{"number":80,"name":"http","protocol":"HTTP","tls":{}}],"endpoints":[{"address":"10.0.0.1","network":"n2"}]}`,
			want: []string{
				"spec.addresses: CIDR addresses are allowed only with resolution NONE or STATIC (refused by Istio's rules: what Envoy would refuse of it is not served)",
				"spec.addresses: resolution DYNAMIC_DNS takes no addresses (refused by Istio's rules: what Envoy would refuse of it is not served)",
				"spec.endpoints: resolution DYNAMIC_DNS takes no endpoints (refused by Istio's rules: what Envoy would refuse of it is not served)",
				"spec.resolution: DYNAMIC_DNS is not served; the hosts get clusters without endpoints",
				"spec.addresses[0]: a CIDR range is not listened on; only addresses are",
				"spec.ports[0].tls: ignored, not generated",
				"spec.endpoints[0].network: ignored, not generated",
			},
		},
		"an entry Istio's rules refuse is reported": {
			group: groupNetworking, kind: "ServiceEntry",
			spec: `{"hosts":["*"],"resolution":"NONE","ports":[{"number":80,"name":"http","protocol":"HTTP"}]}`,
			want: []string{"spec.hosts[0]: the host * would take every name (refused by Istio's rules: what Envoy would refuse of it is not served)"},
		},
		"a field Istio adds later is reported": {
			group: groupNetworking, kind: "DestinationRule",
			spec: `{"host":"a","trafficPolicy":{"retryBudget":{}}}`,
			want: []string{"spec.trafficPolicy.retryBudget: ignored, not generated"},
		},
		"an AuthorizationPolicy with a selector is honoured whole": {
			group: groupSecurity, kind: "AuthorizationPolicy",
			spec: `{"selector":{"matchLabels":{"app":"a"}},"action":"DENY","rules":[{}]}`,
		},
		"an AuthorizationPolicy by targetRef applies to no sidecar": {
			group: groupSecurity, kind: "AuthorizationPolicy",
			spec: `{"targetRef":{"kind":"Gateway","name":"gw"},"rules":[{}]}`,
			want: []string{"spec.targetRef: " + notAttached},
		},
		"a dry-run AuthorizationPolicy is not evaluated": {
			group: groupSecurity, kind: "AuthorizationPolicy",
			annotations: map[string]string{"istio.io/dry-run": "true"},
			spec:        `{"rules":[{}]}`,
			want:        []string{"metadata.annotations[istio.io/dry-run]: the policy is not evaluated at all (Istio logs what it would decide)"},
		},
		"a jwtRule timeout is not used": {
			group: groupSecurity, kind: "RequestAuthentication",
			spec: `{"targetRefs":[{"kind":"Gateway","name":"gw"}],"jwtRules":[{"issuer":"a"},{"issuer":"b","timeout":"5s"}]}`,
			want: []string{
				"spec.targetRefs: " + notAttached,
				"spec.jwtRules[1].timeout: not used; istiod fetches key sets with its own limits",
			},
		},
		"a PeerAuthentication is honoured whole": {
			group: groupSecurity, kind: "PeerAuthentication",
			spec: `{"mtls":{"mode":"STRICT"},"portLevelMtls":{"80":{"mode":"DISABLE"}}}`,
		},
		"an EnvoyFilter is ignored whole, whatever it holds": {
			group: groupNetworking, kind: "EnvoyFilter",
			spec: `{}`,
			want: []string{"the whole object: " + notRead},
		},
		"a WorkloadEntry from the API server is ignored whole": {
			group: groupNetworking, kind: "WorkloadEntry",
			spec: `{"address":"10.0.0.1"}`,
			want: []string{"the whole object: WorkloadEntries are read from --configDir only, not from the API server"},
		},
		"a Gateway API Gateway is ignored whole": {
			group: groupGatewayAPI, kind: "Gateway",
			spec: `{"gatewayClassName":"istio"}`,
			want: []string{"the whole object: " + notRead},
		},
	} {
		t.Run(name, func(t *testing.T) {
			k := mustLookup(t, tc.group, tc.kind)
			got := k.Ignored(tc.annotations, spec(t, tc.spec))
			if !slices.Equal(got, tc.want) {
				t.Errorf("ignored\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestEveryKindNotHonouredIsReported: a kind not honoured in full is one
// the reporter watches; a kind not honoured at all is read by nothing.
func TestEveryKindNotHonouredIsReported(t *testing.T) {
	reported := Reported()
	for _, k := range Kinds() {
		in := slices.ContainsFunc(reported, func(r Kind) bool { return r.String() == k.String() })
		if in != (k.Support != Honoured) {
			t.Errorf("%s: support %s, reported %t", k, k.Support, in)
		}
		// A kind not honoured is not read at all, or (Kubernetes' Ingress
		// kinds) read to tell the objects Istio would serve, each
		// reported whole.
		whole := k.unread == notRead || k.Group == groupIngress
		if (k.Support == Not) != whole {
			t.Errorf("%s: support %s, unread %q", k, k.Support, k.unread)
		}
	}
}

func TestKindsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		if seen[k.CRD()] || seen[k.String()] {
			t.Errorf("%s (%s) listed twice", k, k.CRD())
		}
		seen[k.CRD()], seen[k.String()] = true, true
	}
}
