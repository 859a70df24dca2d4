package inject

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// grpcAgentContainer is istio-proxy for proxyless gRPC: pilot-agent alone,
// no Envoy and no traffic capture. It goes first among the containers. It serves xDS and certificates to the
// app over files in shared volumes.
func (b *builder) grpcAgentContainer() corev1.Container {
	status := b.values.Global.Proxy.StatusPort
	ready := b.readinessProbe()
	ready.HTTPGet.Port = intstr.FromInt32(status) // no Envoy: the agent answers
	env := []corev1.EnvVar{
		valueEnv("ISTIO_META_GENERATOR", "grpc"),
		valueEnv("OUTPUT_CERTS", outputCertsDir),
	}
	env = append(env, b.commonEnv(false)...)
	env = append(env,
		valueEnv("ISTIO_META_DNS_CAPTURE", "false"),
		valueEnv("DISABLE_ENVOY", "true"))
	return corev1.Container{
		Name:  ProxyContainerName,
		Image: b.set.image,
		Ports: []corev1.ContainerPort{{
			Name: "mesh-metrics", ContainerPort: status, Protocol: corev1.ProtocolTCP,
		}},
		Args:            b.proxyArgs(),
		Env:             env,
		ImagePullPolicy: corev1.PullPolicy(b.values.Global.ImagePullPolicy),
		ReadinessProbe:  ready,
		// The app reads its xDS bootstrap from the agent: hold it until the
		// agent is ready.
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{
			"pilot-agent", "wait", "--url=http://localhost:" + strconv.Itoa(int(status)) + "/healthz/ready",
		}}}},
		Resources:       *b.set.resources.DeepCopy(),
		SecurityContext: restrictedContext(),
		VolumeMounts:    grpcAgentMounts(),
	}
}

// wireGRPCApps points every app container at the agent's bootstrap and
// certificates.
func wireGRPCApps(pod *corev1.Pod) {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name == ProxyContainerName {
			continue
		}
		c.Env = setEnv(c.Env, valueEnv("GRPC_XDS_EXPERIMENTAL_SECURITY_SUPPORT", "true"))
		c.Env = setEnv(c.Env, valueEnv("GRPC_XDS_BOOTSTRAP", grpcBootstrap))
		for _, m := range grpcAppMounts() {
			if !hasMount(c.VolumeMounts, m) {
				c.VolumeMounts = append(c.VolumeMounts, m)
			}
		}
	}
}

// setEnv replaces a variable of the same name or appends it.
func setEnv(env []corev1.EnvVar, e corev1.EnvVar) []corev1.EnvVar {
	for i := range env {
		if env[i].Name == e.Name {
			env[i] = e
			return env
		}
	}
	return append(env, e)
}

func hasMount(mounts []corev1.VolumeMount, m corev1.VolumeMount) bool {
	for _, x := range mounts {
		if x.Name == m.Name || x.MountPath == m.MountPath {
			return true
		}
	}
	return false
}
