package interop

import (
	"encoding/json"
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// fleetNodeInfo is what every simulated sidecar's node says about the
// mesh it belongs to.
type fleetNodeInfo struct {
	istiodNS  string
	clusterID string
}

// fleetIstioVersion is the Istio release of the istio.io/istio this module
// builds (its VERSION file), as pilot-agent would report it.
const fleetIstioVersion = "1.31.0"

// node is the node pilot-agent sends for the sidecar of pod, with the
// metadata it takes from the injected container's environment (Istio's
// pkg/bootstrap: ISTIO_META_* variables, POD_NAME, POD_NAMESPACE,
// SERVICE_ACCOUNT, INSTANCE_IP, ISTIO_METAJSON_LABELS and the pod's labels
// from the downward API, PROXY_CONFIG).
func (c fleetNodeInfo) node(pod *fleetPod) *core.Node {
	labels := map[string]any{}
	for k, v := range pod.labels() {
		labels[k] = v
	}
	podPorts, _ := json.Marshal([]map[string]any{{"name": "http", "containerPort": fleetTargetPort, "protocol": "TCP"}})
	discovery := fmt.Sprintf("istiod.%s.svc:15012", c.istiodNS)
	md, err := structpb.NewStruct(map[string]any{
		"NAME":                  pod.name,
		"NAMESPACE":             pod.ns,
		"SERVICE_ACCOUNT":       pod.sa,
		"LABELS":                labels,
		"INSTANCE_IPS":          pod.ip,
		"ISTIO_VERSION":         fleetIstioVersion,
		"CLUSTER_ID":            c.clusterID,
		"MESH_ID":               trustDomain,
		"INTERCEPTION_MODE":     "REDIRECT",
		"WORKLOAD_NAME":         pod.app,
		"OWNER":                 fmt.Sprintf("kubernetes://apis/apps/v1/namespaces/%s/deployments/%s", pod.ns, pod.app),
		"APP_CONTAINERS":        "app",
		"POD_PORTS":             string(podPorts),
		"ENVOY_STATUS_PORT":     15021,
		"ENVOY_PROMETHEUS_PORT": 15090,
		"PILOT_SAN":             []any{fmt.Sprintf("istiod.%s.svc", c.istiodNS)},
		"PROXY_CONFIG": map[string]any{
			"binaryPath":               "/usr/local/bin/envoy",
			"configPath":               "./etc/istio/proxy",
			"controlPlaneAuthPolicy":   "MUTUAL_TLS",
			"discoveryAddress":         discovery,
			"drainDuration":            "45s",
			"proxyAdminPort":           15000,
			"serviceCluster":           "istio-proxy",
			"statNameLength":           79,
			"statusPort":               15020,
			"terminationDrainDuration": "5s",
		},
	})
	if err != nil {
		panic(err)
	}
	return &core.Node{
		Id:            fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", pod.ip, pod.name, pod.ns, pod.ns),
		Cluster:       pod.app + "." + pod.ns,
		Metadata:      md,
		UserAgentName: "envoy",
	}
}
