package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestRewriteProbes(t *testing.T) {
	named := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	cases := map[string]struct {
		probe     corev1.Probe
		ports     []corev1.ContainerPort
		include   string
		exclude   string
		rewritten bool // the probe ends up pointing at the agent
		probers   string
	}{
		"an HTTP probe moves to the agent": {
			probe:     corev1.Probe{ProbeHandler: httpProbe("/ready", 8080), TimeoutSeconds: 2},
			rewritten: true,
			probers:   `{"/app-health/app/readyz":{"httpGet":{"path":"/ready","port":8080},"timeoutSeconds":2}}`,
		},
		"a named HTTP port is resolved": {
			probe:     corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/r", Port: intstr.FromString("http")}}},
			ports:     named,
			rewritten: true,
			probers:   `{"/app-health/app/readyz":{"httpGet":{"path":"/r","port":8080}}}`,
		},
		"an unknown named port is left alone": {
			probe: corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/r", Port: intstr.FromString("nope")}}},
		},
		"a TCP probe becomes an HTTP probe": {
			probe:     corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}},
			ports:     named,
			rewritten: true,
			probers:   `{"/app-health/app/readyz":{"tcpSocket":{"port":8080}}}`,
		},
		"a gRPC probe becomes an HTTP probe": {
			probe:     corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000}}},
			rewritten: true,
			probers:   `{"/app-health/app/readyz":{"grpc":{"port":9000,"service":null}}}`,
		},
		"an exec probe is untouched": {
			probe: corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}},
		},
		"a probe on an excluded port is untouched": {
			probe:   corev1.Probe{ProbeHandler: httpProbe("/ready", 8080)},
			exclude: "8080",
		},
		"a probe on a port outside includeInboundPorts is untouched": {
			probe:   corev1.Probe{ProbeHandler: httpProbe("/ready", 8080)},
			include: "9090",
		},
		"a probe on an included port is rewritten": {
			probe:     corev1.Probe{ProbeHandler: httpProbe("/ready", 9090)},
			include:   "9090",
			rewritten: true,
			probers:   `{"/app-health/app/readyz":{"httpGet":{"path":"/ready","port":9090}}}`,
		},
		"a probe already pointing at the agent is not recorded again": {
			probe:     corev1.Probe{ProbeHandler: httpProbe("/app-health/app/readyz", 15020)},
			rewritten: true, // it points at the agent, and probers stays empty
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			probe := tc.probe.DeepCopy()
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: tc.ports, ReadinessProbe: probe}}}}
			s := &settings{includeInboundPorts: firstNonEmpty(tc.include, "*"), excludeInboundPorts: tc.exclude}
			got, err := rewriteProbes(pod, 15020, s)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.probers {
				t.Errorf("probers = %s, want %s", got, tc.probers)
			}
			rp := pod.Spec.Containers[0].ReadinessProbe
			isAgent := rp.HTTPGet != nil && rp.HTTPGet.Port.IntValue() == 15020 && rp.HTTPGet.Path == "/app-health/app/readyz" &&
				rp.TCPSocket == nil && rp.GRPC == nil
			if tc.rewritten != isAgent {
				t.Errorf("rewritten = %t, want %t: %+v", isAgent, tc.rewritten, rp)
			}
			if !tc.rewritten && tc.probe.HTTPGet != nil && rp.HTTPGet.Path != tc.probe.HTTPGet.Path {
				t.Errorf("probe changed: %+v", rp)
			}
		})
	}
}

func TestRedirectedProbeTurnsHTTPSIntoHTTP(t *testing.T) {
	p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/x", Port: intstr.FromInt32(8443), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 7}
	got := redirectedProbe(p, "/app-health/a/livez", 15020)
	if got.HTTPGet.Scheme != corev1.URISchemeHTTP || got.PeriodSeconds != 7 || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("got %+v (original %+v)", got.HTTPGet, p.HTTPGet)
	}
}
