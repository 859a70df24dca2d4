package interop

// sidecarVSCase is one comparison of TestSidecarVirtualServicesMatchIstio:
// Istio configuration over sidecarWorld, the sidecars judged (default:
// app/sleep-1 and other/backend-1) and HTTP calls beyond the matrix.
type sidecarVSCase struct {
	name  string
	istio string
	pods  []string
	calls []vsCall
	// noVSRoutes: the case expects no route of a VirtualService (one
	// bound elsewhere, or not exported to the pods).
	noVSRoutes bool
}

const echoDR = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
`

var sidecarVSCases = []sidecarVSCase{{
	name:       "no VirtualService: default routes with Istio's retry policy and timeouts",
	noVSRoutes: true,
}, {
	name:       "DestinationRule consistent hash on default routes, port-level first",
	noVSRoutes: true,
	istio: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
    portLevelSettings:
    - port: {number: 8000}
      loadBalancer: {consistentHash: {useSourceIp: true}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: other}
spec:
  host: backend
  trafficPolicy:
    loadBalancer: {consistentHash: {httpCookie: {name: session, ttl: 10s}}}
`,
}, {
	name: "prefix, exact and regex paths",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - name: api
    match: [{uri: {prefix: /api}}]
    route: [{destination: {host: echo, port: {number: 8000}}}]
  - name: health
    match: [{uri: {exact: /health}}]
    route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 80}}}]
  - name: versioned
    match: [{uri: {regex: "^/v[0-9]+/.*"}}]
    route: [{destination: {host: sleep}}]
  - name: rest
    route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/api/x"}, {path: "/health"}, {path: "/health/x"}, {path: "/v2/items"}, {path: "/other"},
		{port: 8000, path: "/api"}, {host: "echo", path: "/health"}},
}, {
	name: "header, query parameter and method matches",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo.app.svc.cluster.local]
  http:
  - name: headers
    match:
    - headers:
        x-exact: {exact: "yes"}
        x-prefix: {prefix: "pre"}
        x-regex: {regex: "[a-z]+"}
    - withoutHeaders:
        x-banned: {exact: "1"}
      queryParams:
        debug: {exact: "true"}
    route: [{destination: {host: sleep}}]
  - name: method
    match: [{method: {exact: POST}}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{headers: map[string]string{"x-exact": "yes", "x-prefix": "prefix", "x-regex": "abc"}},
		{headers: map[string]string{"x-exact": "no"}}, {path: "/?debug=true"}},
}, {
	name: "weights between subsets of a DestinationRule",
	istio: echoDR + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - route:
    - {destination: {host: echo, subset: v1}, weight: 90}
    - {destination: {host: echo, subset: v2}, weight: 10}
`,
	calls: []vsCall{{path: "/"}},
}, {
	name: "weights with a zero weight, across services and ports",
	istio: echoDR + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /split}}]
    route:
    - {destination: {host: echo, subset: v1, port: {number: 80}}, weight: 50}
    - {destination: {host: backend.other.svc.cluster.local, port: {number: 80}}, weight: 50}
    - {destination: {host: echo, subset: v2}, weight: 0}
  - route: [{destination: {host: echo, subset: v2}}]
`,
	calls: []vsCall{{path: "/split"}, {path: "/"}},
}, {
	name: "redirect",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /old}}]
    redirect: {uri: /new, authority: sleep.app.svc.cluster.local, redirectCode: 302}
  - match: [{uri: {prefix: /port}}]
    redirect: {derivePort: FROM_REQUEST_PORT, scheme: https}
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/old/x"}, {path: "/port"}},
}, {
	name: "rewrite of path and authority",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /v1}}]
    rewrite: {uri: /, authority: internal.echo}
    route: [{destination: {host: echo}}]
  - match: [{uri: {prefix: /re}}]
    rewrite: {uriRegexRewrite: {match: "^/re/(.*)$", rewrite: "/\\1"}}
    route: [{destination: {host: echo}}]
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/v1/a"}, {path: "/re/b"}},
}, {
	name: "timeout and retries",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /slow}}]
    timeout: 3s
    retries: {attempts: 3, perTryTimeout: 1s, retryOn: "5xx,gateway-error,503", retryRemoteLocalities: true}
    route: [{destination: {host: echo}}]
  - match: [{uri: {prefix: /once}}]
    retries: {attempts: 0}

    route: [{destination: {host: echo}}]
  - match: [{uri: {prefix: /sticky}}]
    retries: {attempts: 2, retryIgnorePreviousHosts: false}
    route: [{destination: {host: echo}}]
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/slow"}, {path: "/once"}},
}, {
	name: "gRPC port with a timeout",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{port: 7070}]
    timeout: 2s
    route: [{destination: {host: echo, port: {number: 7070}}}]
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{port: 7070, proto: "http2", path: "/svc.Echo/Call"}},
}, {
	name: "fault injection",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /faulty}}]
    fault:
      delay: {fixedDelay: 2s, percentage: {value: 50}}
      abort: {httpStatus: 503, percentage: {value: 10.5}}
    route: [{destination: {host: echo}}]
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/faulty"}},
}, {
	name: "mirror and mirrors",
	istio: echoDR + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /m}}]
    route: [{destination: {host: echo, subset: v1}}]
    mirror: {host: echo, subset: v2}
    mirrorPercentage: {value: 25}
  - route: [{destination: {host: echo}}]
    mirrors:
    - destination: {host: backend.other.svc.cluster.local}
      percentage: {value: 5}
`,
	calls: []vsCall{{path: "/m"}},
}, {
	name: "CORS policy",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - corsPolicy:
      allowOrigins: [{exact: https://example.com}, {regex: "https://.*\\.example\\.org"}]
      allowMethods: [GET, POST]
      allowHeaders: [x-custom]
      exposeHeaders: [x-exposed]
      maxAge: 24h
      allowCredentials: true
    route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/", headers: map[string]string{"Origin": "https://example.com"}}},
}, {
	name: "direct response",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {exact: /teapot}}]
    directResponse: {status: 418, body: {string: "short and stout"}}
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/teapot"}},
}, {
	name: "header operations on the rule and per destination",
	istio: echoDR + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - headers:
      request: {set: {x-set: a}, add: {x-add: b}, remove: [x-gone]}
      response: {set: {x-resp: c}, remove: [server]}
    route:
    - destination: {host: echo, subset: v1}
      weight: 60
      headers: {request: {set: {x-subset: v1}}}
    - destination: {host: echo, subset: v2}
      weight: 40
      headers: {response: {add: {x-subset: v2}}}
`,
}, {
	name: "exportTo its own namespace: seen from there alone",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  exportTo: ["."]
  http:
  - match: [{uri: {prefix: /private}}]
    route: [{destination: {host: echo, port: {number: 8000}}}]
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/private"}},
}, {
	name: "exportTo another namespace by name",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: backend, namespace: other}
spec:
  hosts: [backend]
  exportTo: [app]
  http:
  - match: [{uri: {prefix: /v}}]
    route: [{destination: {host: backend, port: {number: 80}}}]
    timeout: 5s
  - route: [{destination: {host: backend}}]
`,
	calls: []vsCall{{addr: "10.96.1.10", host: "backend.other.svc.cluster.local", path: "/v"}},
}, {
	name: "delegate VirtualService of another namespace",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /backend}}]
    delegate: {name: backend-routes, namespace: other}
  - route: [{destination: {host: echo}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: backend-routes, namespace: other}
spec:
  http:
  - match: [{uri: {prefix: /backend/v1}}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
  - route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 80}}}]
    timeout: 7s
`,
	calls: []vsCall{{path: "/backend/v1/x"}, {path: "/backend/x"}, {path: "/x"}},
}, {
	name: "source labels and source namespace",
	pods: []string{"app/sleep-1", "app/echo-1", "other/backend-1"},
	istio: echoDR + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{sourceLabels: {app: sleep}}]
    route: [{destination: {host: echo, subset: v1}}]
  - match: [{sourceNamespace: other}]
    route: [{destination: {host: echo, subset: v2}}]
  - route: [{destination: {host: echo}}]
`,
}, {
	name: "a host that is no service, on port 80 and beside a service",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: external, namespace: app}
spec:
  hosts: [api.example.com]
  http:
  - route: [{destination: {host: echo}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: mixed, namespace: app}
spec:
  hosts: [web.example.com, echo]
  http:
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{addr: unknownIP, host: "api.example.com"}, {addr: unknownIP, host: "web.example.com"},
		{addr: unknownIP, port: 8000, host: "web.example.com"}, {addr: unknownIP, port: 8000, host: "api.example.com"}},
}, {
	name: "wildcard host for a namespace's services",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: all-app, namespace: app}
spec:
  hosts: ["*.app.svc.cluster.local"]
  http:
  - timeout: 4s
    route: [{destination: {host: echo}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: sleep, namespace: app}
spec:
  hosts: [sleep]
  http:
  - route: [{destination: {host: sleep}}]
    timeout: 1s
`,
	calls: []vsCall{{addr: "10.96.0.20", host: "sleep.app.svc.cluster.local"}, {addr: "10.96.0.30", host: "legacy"}},
}, {
	name: "two VirtualServices for one host: the first in Istio's order wins",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a-echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - route: [{destination: {host: echo, port: {number: 8000}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: b-echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - route: [{destination: {host: sleep}}]
`,
}, {
	name: "gateways listing mesh and a gateway; a VirtualService bound to a gateway alone",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  gateways: [mesh, istio-system/ingress]
  http:
  - match: [{uri: {prefix: /gw}, gateways: [istio-system/ingress]}]
    route: [{destination: {host: sleep}}]
  - match: [{uri: {prefix: /mesh}, gateways: [mesh]}]
    route: [{destination: {host: echo, port: {number: 8000}}}]
  - route: [{destination: {host: echo}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: sleep-gw, namespace: app}
spec:
  hosts: [sleep]
  gateways: [istio-system/ingress]
  http:
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{path: "/gw"}, {path: "/mesh"}, {addr: "10.96.0.20", host: "sleep"}},
}, {
	name: "match on a port, and a destination without a port",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{port: 8000, uri: {prefix: /web}}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
  - route: [{destination: {host: legacy}}]
`,
	calls: []vsCall{{port: 8000, path: "/web"}, {port: 8000, path: "/"}, {path: "/web"}},
}, {
	name: "a port whose protocol is sniffed",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{port: 5000, uri: {prefix: /sniffed}}]
    route: [{destination: {host: echo, port: {number: 80}}}]
  - route: [{destination: {host: echo}}]
`,
	calls: []vsCall{{port: 5000, path: "/sniffed"}, {port: 5000, path: "/"}},
}, {
	name: "ignoreUriCase, prefix and regex authority",
	istio: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: backend, namespace: other}
spec:
  hosts: [backend]
  http:
  - match: [{uri: {prefix: /Case}, ignoreUriCase: true}]
    route: [{destination: {host: backend}}]
  - match: [{authority: {prefix: backend.other}}]
    route: [{destination: {host: backend, port: {number: 80}}}]
    timeout: 9s
`,
	calls: []vsCall{{addr: "10.96.1.10", host: "backend.other", path: "/case"}, {addr: "10.96.1.10", host: "backend", path: "/x"}},
}}
