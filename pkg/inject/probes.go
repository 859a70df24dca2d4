package inject

import (
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// EnvAppProbers is the variable in which the agent finds the app's original
// probes, keyed by the path kubelet now calls on the agent.
const EnvAppProbers = "ISTIO_KUBE_APP_PROBERS"

// prober is one original probe as pilot-agent reads it.
type prober struct {
	HTTPGet        *corev1.HTTPGetAction   `json:"httpGet,omitempty"`
	TCPSocket      *corev1.TCPSocketAction `json:"tcpSocket,omitempty"`
	GRPC           *corev1.GRPCAction      `json:"grpc,omitempty"`
	TimeoutSeconds int32                   `json:"timeoutSeconds,omitempty"`
}

// appHealthPath is the agent path for one probe of one container.
func appHealthPath(container, kind string) string {
	return "/app-health/" + container + "/" + kind
}

// rewriteProbes points HTTP, TCP and gRPC probes (and HTTP and TCP
// lifecycle hooks) of app containers at the agent's status port and returns the originals as ISTIO_KUBE_APP_PROBERS
// JSON ("" when nothing was rewritten). Exec probes are left alone, and so
// are probes on ports the sidecar does not capture.
func rewriteProbes(pod *corev1.Pod, statusPort int32, s *settings) (string, error) {
	out := map[string]*prober{}
	captured := capturedPorts(s)
	rewrite := func(c *corev1.Container) {
		if c.Name == ProxyContainerName {
			return
		}
		for _, p := range []struct {
			probe **corev1.Probe
			kind  string
		}{
			{&c.ReadinessProbe, "readyz"},
			{&c.LivenessProbe, "livez"},
			{&c.StartupProbe, "startupz"},
		} {
			path := appHealthPath(c.Name, p.kind)
			orig, ok := originalProber(*p.probe, c.Ports, statusPort, path)
			if !ok || !captured(proberPort(orig)) {
				continue
			}
			out[path] = orig
			*p.probe = redirectedProbe(*p.probe, path, statusPort)
		}
		if c.Lifecycle != nil {
			for _, h := range []struct {
				handler **corev1.LifecycleHandler
				kind    string
			}{
				{&c.Lifecycle.PreStop, "prestopz"},
				{&c.Lifecycle.PostStart, "poststartz"},
			} {
				path := appLifecyclePath(c.Name, h.kind)
				if hook, orig, ok := redirectedHook(*h.handler, c.Ports, statusPort, path); ok && captured(proberPort(orig)) {
					out[path] = orig
					*h.handler = hook
				}
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		rewrite(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		rewrite(&pod.Spec.Containers[i])
	}
	if len(out) == 0 {
		return "", nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("encode app probers: %w", err)
	}
	return string(b), nil
}

// appLifecyclePath is the agent path for one lifecycle hook of one container.
func appLifecyclePath(container, kind string) string {
	return "/app-lifecycle/" + container + "/" + kind
}

// redirectedHook points an HTTP or TCP lifecycle hook at the agent, as
// probes are: kubelet calls the hook from outside the mesh, so a hook on a
// captured port would otherwise be refused under strict mTLS. Exec and
// sleep hooks are left alone.
func redirectedHook(h *corev1.LifecycleHandler, ports []corev1.ContainerPort, statusPort int32, path string) (*corev1.LifecycleHandler, *prober, bool) {
	if h == nil || (h.HTTPGet == nil && h.TCPSocket == nil) {
		return nil, nil, false
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: h.HTTPGet, TCPSocket: h.TCPSocket}}
	orig, ok := originalProber(probe, ports, statusPort, path)
	if !ok {
		return nil, nil, false
	}
	orig.TimeoutSeconds = 0 // hooks have none
	out := h.DeepCopy()
	out.TCPSocket = nil
	out.HTTPGet = redirectedProbe(probe, path, statusPort).HTTPGet
	return out, orig, true
}

// originalProber copies a probe for the agent with named ports resolved.
func originalProber(p *corev1.Probe, ports []corev1.ContainerPort, statusPort int32, path string) (*prober, bool) {
	if p == nil {
		return nil, false
	}
	switch {
	case p.HTTPGet != nil:
		if p.HTTPGet.Path == path && p.HTTPGet.Port.IntValue() == int(statusPort) {
			return nil, false // already points at the agent
		}
		port, ok := resolvePort(p.HTTPGet.Port, ports)
		if !ok {
			return nil, false
		}
		h := p.HTTPGet.DeepCopy()
		h.Port = intstr.FromInt32(port)
		return &prober{HTTPGet: h, TimeoutSeconds: p.TimeoutSeconds}, true
	case p.TCPSocket != nil:
		port, ok := resolvePort(p.TCPSocket.Port, ports)
		if !ok {
			return nil, false
		}
		t := p.TCPSocket.DeepCopy()
		t.Port = intstr.FromInt32(port)
		return &prober{TCPSocket: t, TimeoutSeconds: p.TimeoutSeconds}, true
	case p.GRPC != nil:
		if p.GRPC.Port < 1 || p.GRPC.Port > 65535 {
			return nil, false
		}
		return &prober{GRPC: p.GRPC.DeepCopy(), TimeoutSeconds: p.TimeoutSeconds}, true
	}
	return nil, false
}

func proberPort(p *prober) int32 {
	switch {
	case p.HTTPGet != nil:
		return p.HTTPGet.Port.IntVal
	case p.TCPSocket != nil:
		return p.TCPSocket.Port.IntVal
	default:
		return p.GRPC.Port
	}
}

// resolvePort turns a probe port (number, numeric string or port name) into
// a number using the container's ports.
func resolvePort(p intstr.IntOrString, ports []corev1.ContainerPort) (int32, bool) {
	if p.Type == intstr.Int {
		return p.IntVal, p.IntVal >= 1 && p.IntVal <= 65535
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return int32(n), n >= 1 && n <= 65535
	}
	for _, cp := range ports {
		if cp.Name != "" && cp.Name == p.StrVal {
			return cp.ContainerPort, cp.ContainerPort >= 1 && cp.ContainerPort <= 65535
		}
	}
	return 0, false
}

// redirectedProbe keeps the probe's timing and replaces its action with an
// HTTP GET on the agent. HTTPS becomes HTTP: the agent calls the app over
// HTTPS itself.
func redirectedProbe(p *corev1.Probe, path string, statusPort int32) *corev1.Probe {
	np := p.DeepCopy()
	var h *corev1.HTTPGetAction
	if np.HTTPGet != nil {
		h = np.HTTPGet
	} else {
		h = &corev1.HTTPGetAction{}
	}
	h.Path = path
	h.Port = intstr.FromInt32(statusPort)
	if h.Scheme == corev1.URISchemeHTTPS {
		h.Scheme = corev1.URISchemeHTTP
	}
	np.ProbeHandler = corev1.ProbeHandler{HTTPGet: h}
	return np
}

// capturedPorts reports whether inbound traffic to a port goes through the
// sidecar, from includeInboundPorts and excludeInboundPorts.
func capturedPorts(s *settings) func(int32) bool {
	include := map[int32]bool{}
	if s.includeInboundPorts != "" && s.includeInboundPorts != "*" {
		ports, _ := parsePortList(s.includeInboundPorts) // normalized already
		for _, p := range ports {
			include[p] = true
		}
		return func(p int32) bool { return include[p] }
	}
	exclude := map[int32]bool{}
	if s.excludeInboundPorts != "" {
		ports, _ := parsePortList(s.excludeInboundPorts)
		for _, p := range ports {
			exclude[p] = true
		}
	}
	return func(p int32) bool { return !exclude[p] }
}
