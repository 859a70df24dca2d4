package inject

import (
	"cmp"
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// maxStatusSize bounds the sidecar.istio.io/status annotation read by
// InjectedProxyOf; a larger one is not decoded.
const maxStatusSize = 16 << 10

// InjectedProxy is what a pod's injected istio-proxy says about where it
// came from and how it learns of a new root.
type InjectedProxy struct {
	// Revision is the control-plane revision that injected the pod: the
	// revision in sidecar.istio.io/status, else the pod's istio.io/rev
	// annotation (both injectors write it) or label, else "default".
	Revision string
	// PCDS is true when pilot-agent asks istiod for the trust bundle over
	// xDS: PROXY_CONFIG_XDS_AGENT is true in the istio-proxy container's
	// environment, as Istio's agent parses it (strconv.ParseBool). Without
	// it the agent takes its roots from its CSR responses only, so a root
	// rotation reaches the proxy only once it is restarted.
	PCDS bool
}

// InjectedProxyOf reports whether pod carries an injected istio-proxy
// (sidecar, native sidecar or gRPC agent), by either injector: the
// sidecar.istio.io/status annotation and a container (or init container)
// named istio-proxy.
func InjectedProxyOf(pod *corev1.Pod) (InjectedProxy, bool) {
	raw, ok := pod.Annotations[AnnotationStatus]
	if !ok {
		return InjectedProxy{}, false
	}
	proxy := containerNamed(pod.Spec.Containers, ProxyContainerName)
	if proxy == nil {
		proxy = containerNamed(pod.Spec.InitContainers, ProxyContainerName)
	}
	if proxy == nil {
		return InjectedProxy{}, false
	}
	var st struct {
		Revision string `json:"revision"`
	}
	if len(raw) <= maxStatusSize {
		_ = json.Unmarshal([]byte(raw), &st) // an unreadable status names no revision
	}
	out := InjectedProxy{Revision: cmp.Or(st.Revision, pod.Annotations[AnnotationRevision], pod.Labels[AnnotationRevision], "default")}
	for _, e := range proxy.Env {
		if e.Name == EnvProxyConfigXDSAgent && e.ValueFrom == nil {
			on, err := strconv.ParseBool(e.Value)
			out.PCDS = err == nil && on
		}
	}
	return out, true
}

func containerNamed(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}
