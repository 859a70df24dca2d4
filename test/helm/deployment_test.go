package helm

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

func envOf(d *appsv1.Deployment) map[string]string {
	out := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
		out[e.Name] = v
	}
	return out
}

func TestDeploymentRunsIstiodDiscovery(t *testing.T) {
	r := mustRender(t, Options{})
	d := deployment(t, r)
	if d.Name != "istiod" || d.Namespace != DefaultNamespace {
		t.Errorf("Deployment %s/%s", d.Namespace, d.Name)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/bulwark-mesh/istiod:0.1.0" {
		t.Errorf("image %s, want the chart's appVersion as tag", c.Image)
	}
	if len(c.Args) == 0 || c.Args[0] != "discovery" {
		t.Fatalf("args %v, want discovery first", c.Args)
	}
	for _, want := range []string{
		"--secureGRPCAddr=:15012", "--grpcAddr=", "--httpAddr=:8080", "--httpsAddr=:15017",
		"--monitoringAddr=:15014", "--state-dir=/var/lib/istio/state", "--cacerts-dir=/etc/cacerts",
		"--trust-domain=cluster.local", "--log-format=json",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	env := envOf(d)
	for k, want := range map[string]string{
		"POD_NAME": "fieldRef:metadata.name", "POD_NAMESPACE": "fieldRef:metadata.namespace",
		"REVISION": "default", "CLUSTER_ID": "Kubernetes", "TRUST_DOMAIN": "cluster.local",
	} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}
	if _, ok := env["JWT_RULE"]; ok {
		t.Error("JWT_RULE set without a jwtRule")
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" || p.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("readiness probe %+v, want GET :8080/ready", p)
	}
	if d.Spec.Template.Labels["sidecar.istio.io/inject"] != "false" {
		t.Error("istiod's own pods may be injected")
	}
}

func TestPlaintextXDSIsOptIn(t *testing.T) {
	c := deployment(t, mustRender(t, Options{Values: map[string]any{"plaintextXDS": true}})).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--grpcAddr=:15010") {
		t.Errorf("args %v lack --grpcAddr=:15010", c.Args)
	}
}

func TestLoopbackHTTPJWKSIsOptIn(t *testing.T) {
	for on, want := range map[bool]bool{false: false, true: true} {
		c := deployment(t, mustRender(t, Options{Values: map[string]any{"allowLoopbackHTTPJWKS": on}})).Spec.Template.Spec.Containers[0]
		if got := slices.Contains(c.Args, "--allow-loopback-http-jwks"); got != want {
			t.Errorf("allowLoopbackHTTPJWKS: %t: args %v, want --allow-loopback-http-jwks %t", on, c.Args, want)
		}
	}
}

func TestVolumesForAReadOnlyRoot(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, tc.opts)
			spec := deployment(t, r).Spec.Template.Spec
			vols := map[string]corev1.Volume{}
			for _, v := range spec.Volumes {
				vols[v.Name] = v
			}
			mounts := map[string]string{}
			for _, m := range spec.Containers[0].VolumeMounts {
				if _, ok := vols[m.Name]; !ok {
					t.Errorf("mount %s has no volume", m.Name)
				}
				mounts[m.MountPath] = m.Name
			}
			for _, path := range []string{"/var/run/secrets/tokens", "/etc/cacerts", "/etc/istio/config", "/var/lib/istio/inject", "/var/lib/istio/state"} {
				if _, ok := mounts[path]; !ok {
					t.Errorf("nothing mounted at %s", path)
				}
			}
			ca := vols[mounts["/etc/cacerts"]].Secret
			if ca == nil || ca.Optional == nil || !*ca.Optional {
				t.Errorf("cacerts volume %+v: want an optional Secret", ca)
			}
			tok := vols[mounts["/var/run/secrets/tokens"]].Projected
			if tok == nil || len(tok.Sources) != 1 || tok.Sources[0].ServiceAccountToken == nil || tok.Sources[0].ServiceAccountToken.Audience != "istio-ca" {
				t.Errorf("token volume %+v: want a projected token for istio-ca", tok)
			}
			if vols[mounts["/var/lib/istio/state"]].EmptyDir == nil {
				t.Error("state dir is not an emptyDir")
			}
			for _, path := range []string{"/etc/istio/config", "/var/lib/istio/inject"} {
				cm := vols[mounts[path]].ConfigMap
				if cm == nil {
					t.Errorf("%s is not a ConfigMap", path)
					continue
				}
				configMap(t, r, cm.Name) // exists in the same release
			}
			sa := spec.ServiceAccountName
			found := false
			for _, u := range ofKind(r, "ServiceAccount") {
				found = found || u.GetName() == sa
			}
			if !found {
				t.Errorf("serviceAccountName %s is not rendered", sa)
			}
		})
	}
}

func TestPluggedInCA(t *testing.T) {
	r := mustRender(t, renderCases["plugged-ca"].opts)
	d := deployment(t, r)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "cacerts" && v.Secret.SecretName != "cacerts-cluster1" {
			t.Errorf("cacerts Secret %s", v.Secret.SecretName)
		}
	}
	env := envOf(d)
	if env["TRUST_DOMAIN"] != "mesh.example.com" || env["CLUSTER_ID"] != "cluster1" || !strings.Contains(env["JWT_RULE"], "issuer.example.com") {
		t.Errorf("env %v", env)
	}
}

func TestScaling(t *testing.T) {
	t.Run("one replica has no disruption budget or autoscaler", func(t *testing.T) {
		r := mustRender(t, Options{})
		if n := len(ofKind(r, "PodDisruptionBudget")) + len(ofKind(r, "HorizontalPodAutoscaler")); n != 0 {
			t.Errorf("%d PDB/HPA objects", n)
		}
		if d := deployment(t, r); d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
			t.Errorf("replicas %v", d.Spec.Replicas)
		}
	})
	t.Run("three replicas get a disruption budget", func(t *testing.T) {
		r := mustRender(t, Options{Values: map[string]any{"replicaCount": 3}})
		pdb := only[*policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget")
		if pdb.Spec.MinAvailable.IntValue() != 1 {
			t.Errorf("minAvailable %v", pdb.Spec.MinAvailable)
		}
		if *deployment(t, r).Spec.Replicas != 3 {
			t.Error("replicas not 3")
		}
	})
	t.Run("autoscaling leaves replicas to the autoscaler", func(t *testing.T) {
		r := mustRender(t, renderCases["ha"].opts)
		d := deployment(t, r)
		if d.Spec.Replicas != nil {
			t.Errorf("replicas %d set beside an autoscaler", *d.Spec.Replicas)
		}
		hpa := only[*autoscalingv2.HorizontalPodAutoscaler](t, r, "HorizontalPodAutoscaler")
		if hpa.Spec.ScaleTargetRef.Name != d.Name || *hpa.Spec.MinReplicas != 3 || hpa.Spec.MaxReplicas != 10 {
			t.Errorf("hpa %+v", hpa.Spec)
		}
		pdb := only[*policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget")
		if pdb.Spec.MinAvailable.IntValue() != 2 {
			t.Errorf("minAvailable %v", pdb.Spec.MinAvailable)
		}
		tsc := d.Spec.Template.Spec.TopologySpreadConstraints
		if len(tsc) != 1 || tsc[0].LabelSelector == nil || tsc[0].LabelSelector.MatchLabels["app"] != "istiod" {
			t.Errorf("topology spread %+v: want istiod's selector filled in", tsc)
		}
		if d.Spec.Template.Spec.PriorityClassName != "system-cluster-critical" {
			t.Errorf("priorityClassName %q", d.Spec.Template.Spec.PriorityClassName)
		}
	})
}

func TestServiceMonitorNeedsPrometheusOperator(t *testing.T) {
	opts := renderCases["ha"].opts
	if n := len(ofKind(mustRender(t, opts), "ServiceMonitor")); n != 1 {
		t.Errorf("%d ServiceMonitors with the API served, want 1", n)
	}
	opts.APIVersions = nil
	if n := len(ofKind(mustRender(t, opts), "ServiceMonitor")); n != 0 {
		t.Errorf("%d ServiceMonitors without the API, want 0", n)
	}
}

func TestNotes(t *testing.T) {
	def := mustRender(t, Options{}).Notes
	for _, want := range []string{"istio-injection=enabled", "istio-ca-secret", "KEEPS", "rollout status deployment/istiod",
		// Starting over deletes every Secret that holds a CA key, in the
		// order istiod ca reset deletes them.
		"istiod ca reset --kubeconfig ~/.kube/config --namespace istio-system --yes-delete-the-ca-keys",
		"kubectl -n istio-system delete secret " + strings.Join(secretstore.ResetSecrets, " ") + " --ignore-not-found",
	} {
		if !strings.Contains(def, want) {
			t.Errorf("NOTES lack %q:\n%s", want, def)
		}
	}
	for line := range strings.Lines(def) {
		if strings.Contains(line, "delete secret") && !strings.Contains(line, strings.Join(secretstore.ResetSecrets, " ")) {
			t.Errorf("NOTES delete some of the CA's Secrets, not all of %v: %s", secretstore.ResetSecrets, line)
		}
	}
	canary := mustRender(t, renderCases["canary"].opts).Notes
	if !strings.Contains(canary, "istio.io/rev=canary") || !strings.Contains(canary, "deployment/istiod-canary") {
		t.Errorf("canary NOTES do not say how to use the revision:\n%s", canary)
	}
}
