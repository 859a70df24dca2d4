package interop

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// compatCases are pods injected by Istio's injector and by Bulwark's with
// the same values; the injected pods must agree on every field the sidecar
// depends on. values is laid over the built-in values for both.
var compatCases = map[string]struct {
	values string
	pod    string
}{
	"a pod with one container": {pod: `
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  containers:
  - name: web
    image: example.com/web:1
    ports: [{name: http, containerPort: 8080}]
`},
	"a typical pod with two containers and an HTTP readiness probe": {pod: benchPodYAML},
	"HTTP, TCP and gRPC probes, named ports and HTTPS are rewritten to the agent": {pod: `
metadata: {name: probed, namespace: shop}
spec:
  containers:
  - name: app
    image: example.com/app:1
    ports: [{name: http, containerPort: 8080}, {name: admin, containerPort: 9090}]
    readinessProbe:
      httpGet: {path: /ready, port: http, scheme: HTTPS, httpHeaders: [{name: X-Probe, value: "1"}]}
      periodSeconds: 5
      timeoutSeconds: 2
    livenessProbe:
      tcpSocket: {port: 9090}
      timeoutSeconds: 4
    startupProbe:
      grpc: {port: 7070}
      failureThreshold: 30
  - name: worker
    image: example.com/worker:1
    livenessProbe:
      exec: {command: [/bin/true]}
`},
	"an exec probe is left alone and nothing goes to the agent": {pod: `
metadata: {name: exec, namespace: shop}
spec:
  containers:
  - name: app
    image: example.com/app:1
    readinessProbe:
      exec: {command: [cat, /tmp/ready]}
`},
	"a Deployment's pod with its own init container and volume": {pod: `
metadata:
  generateName: reviews-v1-5b7d9c4f8-
  namespace: shop
  labels: {app: reviews, version: v1, pod-template-hash: 5b7d9c4f8}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: reviews-v1-5b7d9c4f8, uid: 0b5a1c0e-0000-4000-8000-000000000001, controller: true}
spec:
  serviceAccountName: reviews
  initContainers: [{name: wait-for-db, image: example.com/wait:1}]
  containers:
  - name: reviews
    image: example.com/reviews:1
    ports: [{containerPort: 9080, protocol: TCP}]
    volumeMounts: [{name: config, mountPath: /etc/reviews}]
  volumes: [{name: config, configMap: {name: reviews}}]
`},
	"app.kubernetes.io labels, an existing tlsMode and kubectl default-container are kept": {pod: `
metadata:
  name: labelled
  namespace: shop
  labels: {app.kubernetes.io/name: ratings, app.kubernetes.io/version: "2.1", security.istio.io/tlsMode: disabled}
  annotations: {kubectl.kubernetes.io/default-container: sidecar-of-mine}
spec:
  containers:
  - {name: ratings, image: example.com/ratings:2}
  - {name: sidecar-of-mine, image: example.com/helper:1}
`},
	"sidecar.istio.io/proxyImage and logLevel": {pod: `
metadata:
  name: custom-image
  namespace: shop
  annotations:
    sidecar.istio.io/proxyImage: registry.example.com:5000/mesh/proxyv2:1.28.0-distroless
    sidecar.istio.io/logLevel: debug
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"all four proxy resource annotations replace the default resources": {pod: `
metadata:
  name: sized
  namespace: shop
  annotations:
    sidecar.istio.io/proxyCPU: 50m
    sidecar.istio.io/proxyMemory: 64Mi
    sidecar.istio.io/proxyCPULimit: "1"
    sidecar.istio.io/proxyMemoryLimit: 512Mi
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"one proxy resource annotation alone leaves no limits": {pod: `
metadata:
  name: cpu-only
  namespace: shop
  annotations: {sidecar.istio.io/proxyCPU: 200m}
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"traffic annotations reach istio-iptables": {pod: `
metadata:
  name: traffic
  namespace: shop
  annotations:
    traffic.sidecar.istio.io/includeOutboundIPRanges: 10.0.0.0/8,172.16.0.0/12
    traffic.sidecar.istio.io/excludeOutboundIPRanges: 10.96.0.1/32
    traffic.sidecar.istio.io/includeInboundPorts: "8080,9090"
    traffic.sidecar.istio.io/excludeInboundPorts: "9091"
    traffic.sidecar.istio.io/excludeOutboundPorts: "5432,6379"
spec:
  containers:
  - name: app
    image: example.com/app:1
    ports: [{containerPort: 8080}]
    readinessProbe: {httpGet: {path: /ready, port: 8080}}
`},
	"proxy.istio.io/config: hold the app, concurrency and proxy metadata": {pod: `
metadata:
  name: configured
  namespace: shop
  annotations:
    proxy.istio.io/config: |
      holdApplicationUntilProxyStarts: true
      concurrency: 2
      proxyMetadata:
        ISTIO_META_DNS_CAPTURE: "true"
spec:
  containers:
  - {name: app, image: example.com/app:1}
  - {name: helper, image: example.com/helper:1}
`},
	"interception mode NONE needs no istio-init": {pod: `
metadata:
  name: no-capture
  namespace: shop
  annotations:
    proxy.istio.io/config: '{"interceptionMode": "NONE"}'
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"sidecar.istio.io/rewriteAppHTTPProbers false keeps the app's probes": {pod: `
metadata:
  name: no-rewrite
  namespace: shop
  annotations: {sidecar.istio.io/rewriteAppHTTPProbers: "false"}
spec:
  containers:
  - name: app
    image: example.com/app:1
    readinessProbe: {httpGet: {path: /ready, port: 8080}}
`},
	"Prometheus annotations are merged into the agent's": {pod: `
metadata:
  name: scraped
  namespace: shop
  annotations: {prometheus.io/scrape: "true", prometheus.io/port: "9100", prometheus.io/path: /metrics}
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"prometheus.istio.io/merge-metrics false leaves Prometheus annotations alone": {pod: `
metadata:
  name: unmerged
  namespace: shop
  annotations: {prometheus.istio.io/merge-metrics: "false", prometheus.io/scrape: "true", prometheus.io/port: "9100"}
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"sidecar.istio.io/nativeSidecar puts istio-proxy among the init containers": {pod: `
metadata:
  name: native
  namespace: shop
  annotations: {sidecar.istio.io/nativeSidecar: "true"}
spec:
  initContainers: [{name: migrate, image: example.com/migrate:1}]
  containers:
  - name: app
    image: example.com/app:1
    ports: [{containerPort: 8080}]
    livenessProbe: {httpGet: {path: /live, port: 8080}}
`},
	"inject.istio.io/templates grpc-agent adds the agent for proxyless gRPC": {pod: `
metadata:
  name: grpc
  namespace: shop
  labels: {app: grpc-echo}
  annotations: {inject.istio.io/templates: grpc-agent}
spec:
  containers:
  - name: echo
    image: example.com/grpc-echo:1
    ports: [{name: grpc, containerPort: 7070}]
    env: [{name: LOG_LEVEL, value: info}, {name: GRPC_XDS_BOOTSTRAP, value: /tmp/mine.json}]
    volumeMounts: [{name: config, mountPath: /etc/echo}, {name: scratch, mountPath: /etc/istio/proxy}]
    readinessProbe: {grpc: {port: 7070}}
  volumes:
  - {name: config, configMap: {name: echo}}
  - {name: scratch, emptyDir: {}}
`},
	"values: revision, cluster, network, mesh ID, pull secrets (the pod has one too) and JSON logs": {
		values: `{
  "revision": "canary",
  "global": {
    "network": "net-east", "meshID": "mesh-1", "logAsJson": true,
    "multiCluster": {"clusterName": "east"},
    "imagePullSecrets": ["regcred"]
  }
}`,
		pod: `
metadata: {name: canary, namespace: shop}
spec:
  imagePullSecrets: [{name: mine}]
  containers: [{name: app, image: example.com/app:1}]
`},
	"the pod's topology.istio.io/network label wins over the values' network": {
		values: `{"global": {"network": "net-east"}}`,
		pod: `
metadata: {name: west, namespace: shop, labels: {topology.istio.io/network: net-west}}
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"service.istio.io/workload-name names the workload; a long app label is cut to 63": {pod: `
metadata:
  name: named
  namespace: shop
  labels:
    service.istio.io/workload-name: storefront
    app: _shop-frontend-with-a-name-much-longer-than-a-label-may-be-in-kubernetes
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
	"HTTP and TCP lifecycle hooks go through the agent like probes": {pod: `
metadata: {name: hooks, namespace: shop}
spec:
  containers:
  - name: app
    image: example.com/app:1
    ports: [{name: http, containerPort: 8080}]
    lifecycle:
      postStart: {httpGet: {path: /started, port: http}}
      preStop: {tcpSocket: {port: 8080}}
`},
	"values: holdApplicationUntilProxyStarts, startup probe off and other defaults": {
		values: `{
  "global": {
    "imagePullPolicy": "IfNotPresent",
    "proxy": {
      "holdApplicationUntilProxyStarts": true,
      "startupProbe": {"enabled": false},
      "excludeOutboundPorts": "3306",
      "readinessInitialDelaySeconds": 2
    }
  }
}`,
		pod: `
metadata: {name: held, namespace: shop}
spec:
  containers: [{name: app, image: example.com/app:1}]
`},
}

// benchPodYAML is the typical pod of pkg/inject's BenchmarkInject: an app
// and a helper container, an HTTP readiness probe.
const benchPodYAML = `
metadata: {name: app, namespace: default, labels: {app: shop, version: v1}}
spec:
  containers:
  - name: app
    image: example.com/app:1
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {path: /ready, port: 8080}}
  - name: metrics
    image: example.com/metrics:1
`

func parsePod(tb testing.TB, doc string) *corev1.Pod {
	tb.Helper()
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict([]byte(doc), pod); err != nil {
		tb.Fatalf("pod: %v", err)
	}
	pod.APIVersion, pod.Kind = "v1", "Pod"
	return pod
}

// TestInjectMatchesIstio injects every pod with Istio's injector and with
// Bulwark's (Mutate, and Inject's patch applied to the pod), and compares
// the results field by field. The deliberate differences are normalized
// by name; each is listed in pkg/inject's package documentation.
func TestInjectMatchesIstio(t *testing.T) {
	for name, tc := range compatCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pod := parsePod(t, tc.pod)
			in := newInjectors(t, pod.Namespace, tc.values)

			theirs, err := in.istio(pod)
			if err != nil {
				t.Fatalf("istio: %v", err)
			}
			mutated, patched, err := in.bulwark(pod)
			if err != nil {
				t.Fatalf("bulwark: %v", err)
			}
			t.Run("patch gives the mutated pod", func(t *testing.T) {
				comparePodsAs(t, "Mutate", "patch", mutated, patched)
			})

			normalizeEncoding(t, theirs)
			normalizeEncoding(t, patched)
			defaultVolumeSources(theirs)
			dropIstioCRL(t, theirs)
			dropOverrides(theirs)
			dropAgentSecurityContext(t, theirs, patched)
			comparePods(t, theirs, patched)
		})
	}
}
