package interop

// The mesh both Istio's generator and ours see in the sidecar tests: one
// set of Kubernetes objects, and per scenario the Istio policies and mesh
// options on top.

// sidecarWorld is what the apiserver would hold: Services with cluster IPs,
// Ready Pods with their IPs, and the EndpointSlices naming the pods, as the
// EndpointSlice controller writes them, and the node the pods run on. No
// Namespace objects: neither generator reads them.
//
//   - app/echo: the workload under most tests. HTTP by port name (http-web),
//     gRPC by name (grpc), HTTP by appProtocol (web), TCP by name (tcp-db)
//     and a port whose protocol is not declared (other).
//   - app/sleep: a client; its HTTP port 80 is echo's port number too.
//   - app/legacy: a workload without a sidecar (no tlsMode label), service
//     account "default" (written out: the apiserver defaults it, and
//     Istio's fake registry, which has no admission, would leave it empty).
//   - other/backend: a service in another namespace, HTTP 80 and TCP 9090;
//     other/backend-peers: a headless service of the same pod, TCP 6379
//     and 7000 undeclared (Istio: a listener per endpoint address).
const sidecarWorld = `
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z1}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  selector: {app: echo}
  ports:
  - {name: http-web, port: 80, targetPort: 8080, protocol: TCP}
  - {name: grpc, port: 7070, targetPort: 7070, protocol: TCP}
  - {name: web, port: 8000, targetPort: 8001, protocol: TCP, appProtocol: http}
  - {name: tcp-db, port: 9090, targetPort: 9091, protocol: TCP}
  - {name: other, port: 5000, targetPort: 5001, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-1
  namespace: app
  uid: 00000000-0000-0000-0000-0000000ec401
  labels: {app: echo, version: v1, security.istio.io/tlsMode: istio}
spec:
  serviceAccountName: echo-sa
  nodeName: n1
  containers:
  - name: app
    image: echo
    ports: [{containerPort: 8080}, {containerPort: 7070}, {containerPort: 8001}, {containerPort: 9091}, {containerPort: 5001}]
status:
  phase: Running
  podIP: 10.0.0.5
  podIPs: [{ip: 10.0.0.5}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-abcde
  namespace: app
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
endpoints:
- addresses: [10.0.0.5]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-1, namespace: app}
ports:
- {name: http-web, port: 8080, protocol: TCP}
- {name: grpc, port: 7070, protocol: TCP}
- {name: web, port: 8001, protocol: TCP, appProtocol: http}
- {name: tcp-db, port: 9091, protocol: TCP}
- {name: other, port: 5001, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: sleep, namespace: app}
spec:
  clusterIP: 10.96.0.20
  clusterIPs: [10.96.0.20]
  selector: {app: sleep}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata:
  name: sleep-1
  namespace: app
  uid: 00000000-0000-0000-0000-00000051ee01
  labels: {app: sleep, security.istio.io/tlsMode: istio}
spec:
  serviceAccountName: sleep
  nodeName: n1
  containers:
  - name: app
    image: sleep
    ports: [{containerPort: 8080}]
status:
  phase: Running
  podIP: 10.0.0.9
  podIPs: [{ip: 10.0.0.9}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: sleep-abcde
  namespace: app
  labels: {kubernetes.io/service-name: sleep}
addressType: IPv4
endpoints:
- addresses: [10.0.0.9]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: sleep-1, namespace: app}
ports:
- {name: http, port: 8080, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: legacy, namespace: app}
spec:
  clusterIP: 10.96.0.30
  clusterIPs: [10.96.0.30]
  selector: {app: legacy}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
  - {name: tcp-mysql, port: 3306, targetPort: 3306, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata:
  name: legacy-1
  namespace: app
  uid: 00000000-0000-0000-0000-0000001e9ac1
  labels: {app: legacy}
spec:
  serviceAccountName: default
  nodeName: n1
  containers:
  - name: app
    image: legacy
    ports: [{containerPort: 8080}, {containerPort: 3306}]
status:
  phase: Running
  podIP: 10.0.0.7
  podIPs: [{ip: 10.0.0.7}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: legacy-abcde
  namespace: app
  labels: {kubernetes.io/service-name: legacy}
addressType: IPv4
endpoints:
- addresses: [10.0.0.7]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: legacy-1, namespace: app}
ports:
- {name: http, port: 8080, protocol: TCP}
- {name: tcp-mysql, port: 3306, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: other}
spec:
  clusterIP: 10.96.1.10
  clusterIPs: [10.96.1.10]
  selector: {app: backend}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
  - {name: tcp, port: 9090, targetPort: 9090, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata:
  name: backend-1
  namespace: other
  uid: 00000000-0000-0000-0000-0000000bac01
  labels: {app: backend, version: v1, security.istio.io/tlsMode: istio}
spec:
  serviceAccountName: backend-sa
  nodeName: n1
  containers:
  - name: app
    image: backend
    ports: [{containerPort: 8080}, {containerPort: 9090}, {containerPort: 6379}, {containerPort: 7000}]
status:
  phase: Running
  podIP: 10.0.1.5
  podIPs: [{ip: 10.0.1.5}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend-abcde
  namespace: other
  labels: {kubernetes.io/service-name: backend}
addressType: IPv4
endpoints:
- addresses: [10.0.1.5]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: backend-1, namespace: other}
ports:
- {name: http, port: 8080, protocol: TCP}
- {name: tcp, port: 9090, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: backend-peers, namespace: other}
spec:
  clusterIP: None
  clusterIPs: [None]
  selector: {app: backend}
  ports:
  - {name: tcp-cache, port: 6379, targetPort: 6379, protocol: TCP}
  - {name: peer, port: 7000, targetPort: 7000, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend-peers-abcde
  namespace: other
  labels: {kubernetes.io/service-name: backend-peers}
addressType: IPv4
endpoints:
- addresses: [10.0.1.5]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: backend-1, namespace: other}
ports:
- {name: tcp-cache, port: 6379, protocol: TCP}
- {name: peer, port: 7000, protocol: TCP}
`

// sidecarScenario is one mesh configuration, judged from the sidecars of
// the pods it names.
type sidecarScenario struct {
	name string
	// istio is the Istio configuration YAML: PeerAuthentication,
	// AuthorizationPolicy, DestinationRule.
	istio string
	// registryOnly is outboundTrafficPolicy REGISTRY_ONLY.
	registryOnly bool
	// defaultServiceExportTo is mesh config defaultServiceExportTo.
	defaultServiceExportTo []string
	// allowInsecureSkipVerify is istiod's --allow-insecure-skip-verify
	// (Istio always allows it).
	allowInsecureSkipVerify bool
	// tlsDefaults are mesh config tlsDefaults: ECDH curves, then cipher
	// suites.
	tlsDefaults [2][]string
	// pods are the sidecars whose configuration is generated, by
	// "<namespace>/<name>".
	pods []string
}

// allPods are the sidecars every scenario looks at: the server, a client
// of its namespace and a client of another namespace.
var allPods = []string{"app/echo-1", "app/sleep-1", "other/backend-1"}

// sidecarScenarios are the scenarios of every sidecar test, in order.
var sidecarScenarios = []sidecarScenario{{
	name: "mesh default is PERMISSIVE",
	pods: allPods,
}, {
	name: "namespace STRICT",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec:
  mtls: {mode: STRICT}
`,
	pods: allPods,
}, {
	name: "mesh STRICT from the root namespace",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec:
  mtls: {mode: STRICT}
`,
	pods: allPods,
}, {
	name: "workload STRICT with port-level PERMISSIVE and DISABLE",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: echo, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  mtls: {mode: STRICT}
  portLevelMtls:
    9091: {mode: PERMISSIVE}
    8080: {mode: DISABLE}
`,
	pods: []string{"app/echo-1", "app/sleep-1"},
}, {
	name: "workload DISABLE under namespace STRICT",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: echo-off, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  mtls: {mode: DISABLE}
`,
	pods: []string{"app/echo-1", "app/sleep-1"},
}, {
	name: "DestinationRules ISTIO_MUTUAL and DISABLE, port-level and subsets",
	istio: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
    portLevelSettings:
    - port: {number: 9090}
      tls: {mode: DISABLE}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      tls: {mode: DISABLE}
  - name: v2
    labels: {version: v2}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: legacy, namespace: app}
spec:
  host: legacy.app.svc.cluster.local
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
---
# "sleep.app" is not a short name to Istio (only a host without a dot is):
# it names no Kubernetes service, and Istio applies the rule to none.
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: sleep, namespace: app}
spec:
  host: sleep.app
  trafficPolicy:
    tls: {mode: DISABLE}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: other}
spec:
  host: backend
  trafficPolicy:
    tls: {mode: DISABLE}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      portLevelSettings:
      - port: {number: 80}
        tls: {mode: ISTIO_MUTUAL}
`,
	pods: allPods,
}, {
	name: "AuthorizationPolicy ALLOW and DENY on a STRICT workload",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-sleep, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from: [{source: {principals: ["cluster.local/ns/app/sa/sleep"]}}]
    to: [{operation: {methods: ["GET"], paths: ["/api/*"]}}]
  - from: [{source: {principals: ["cluster.local/ns/app/sa/sleep"]}}]
    to: [{operation: {ports: ["9091"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-other, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules:
  - from: [{source: {namespaces: ["other"]}}]
`,
	pods: []string{"app/echo-1", "app/sleep-1"},
}, {
	name: "AuthorizationPolicy ALLOW on a PERMISSIVE workload",
	istio: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-app, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from: [{source: {namespaces: ["app"]}}]
`,
	pods: []string{"app/echo-1"},
}, {
	// echo's port "other" (5000 → 5001) declares no protocol: Istio
	// sniffs it, HTTP and TCP chains on both sides, and RBAC of each kind.
	name: "AuthorizationPolicy on the undeclared port of a STRICT namespace",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-sniffed, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from: [{source: {principals: ["cluster.local/ns/app/sa/sleep"]}}]
    to: [{operation: {ports: ["5001"], methods: ["GET"], paths: ["/api/*"]}}]
  - from: [{source: {namespaces: ["app"]}}]
    to: [{operation: {ports: ["5001"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-sniffed, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules:
  - to: [{operation: {ports: ["5001"], paths: ["/admin/*"]}}]
  - from: [{source: {notNamespaces: ["app"]}}]
    to: [{operation: {ports: ["5001"]}}]
`,
	pods: []string{"app/echo-1", "app/sleep-1"},
}, {
	name: "AuthorizationPolicy on the undeclared port, PERMISSIVE on it under a STRICT workload",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: echo, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  mtls: {mode: STRICT}
  portLevelMtls:
    5001: {mode: PERMISSIVE}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-sniffed, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from: [{source: {principals: ["cluster.local/ns/app/sa/sleep"]}}]
    to: [{operation: {ports: ["5001"], methods: ["GET", "POST"]}}]
  - from: [{source: {ipBlocks: ["10.0.0.0/24"]}}]
    to: [{operation: {ports: ["5001"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-sniffed, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules:
  - to: [{operation: {ports: ["5001"], methods: ["DELETE"]}}]
`,
	pods: []string{"app/echo-1", "app/sleep-1"},
}, {
	name: "AuthorizationPolicy on the undeclared port, DISABLE on it under a PERMISSIVE workload",
	istio: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: echo, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  mtls: {mode: PERMISSIVE}
  portLevelMtls:
    5001: {mode: DISABLE}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-sniffed, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - to: [{operation: {ports: ["5001"], paths: ["/public/*"]}}]
`,
	pods: []string{"app/echo-1", "app/sleep-1"},
}, {
	name: "RequestAuthentication with an ALLOW requiring a token",
	istio: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  jwtRules:
  - issuer: testing@secure.istio.io
    jwks: '{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require-jwt, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from: [{source: {requestPrincipals: ["*"]}}]
    to: [{operation: {ports: ["8080"]}}]
  - to: [{operation: {notPorts: ["8080"]}}]
`,
	pods: []string{"app/echo-1", "app/sleep-1"},
}, {
	name:        "DestinationRules SIMPLE and MUTUAL with files, SNI and SANs, port-level and subsets",
	tlsDefaults: [2][]string{{"P-256", "X25519"}, {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"}},
	istio: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  trafficPolicy:
    tls: {mode: SIMPLE, caCertificates: /etc/certs/ca.pem, caCrl: /etc/certs/crl.pem, sni: echo.example.com, subjectAltNames: [echo.example.com, spiffe://example.com/echo]}
    portLevelSettings:
    - port: {number: 7070}
      tls: {mode: MUTUAL, clientCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      tls: {mode: SIMPLE}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: other}
spec:
  host: backend
  trafficPolicy:
    tls: {mode: MUTUAL, clientCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      portLevelSettings:
      - port: {number: 80}
        tls: {mode: SIMPLE, subjectAltNames: [backend.example.com]}
---
# Only sleep: echo, of the same namespace, has no rule for legacy (the
# namespace's rules decide, and none is without a selector), nor has
# backend (the service's namespace decides as well).
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: legacy-from-sleep, namespace: app}
spec:
  host: legacy
  workloadSelector: {matchLabels: {app: sleep}}
  trafficPolicy:
    tls: {mode: SIMPLE, sni: legacy.example.com}
---
# credentialName reaches a sidecar only through a rule that selects it.
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-from-backend, namespace: other}
spec:
  host: echo.app.svc.cluster.local
  workloadSelector: {matchLabels: {app: backend}}
  trafficPolicy:
    tls: {mode: MUTUAL, credentialName: echo-client, subjectAltNames: [echo.example.com]}
`,
	pods: allPods,
}, {
	name:                    "DestinationRules skipping server verification, where istiod allows it",
	allowInsecureSkipVerify: true,
	istio: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  trafficPolicy:
    tls: {mode: SIMPLE, insecureSkipVerify: true}
    portLevelSettings:
    - port: {number: 7070}
      tls: {mode: MUTUAL, insecureSkipVerify: true, clientCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, sni: echo.example.com}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-from-backend, namespace: other}
spec:
  host: echo.app.svc.cluster.local
  workloadSelector: {matchLabels: {app: backend}}
  trafficPolicy:
    tls: {mode: MUTUAL, insecureSkipVerify: true, credentialName: echo-client}
`,
	pods: allPods,
}, {
	name:         "outbound REGISTRY_ONLY",
	registryOnly: true,
	pods:         allPods,
}}
