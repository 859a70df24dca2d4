package inject

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// grpcAgentContainer is istio-proxy for proxyless gRPC: pilot-agent alone,
// no Envoy and no traffic capture. It serves xDS and certificates to the
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
	env = append(env, b.clusterEnv()...)
	return corev1.Container{
		Name:  ProxyContainerName,
		Image: b.set.image,
		Ports: []corev1.ContainerPort{{
			Name: "mesh-metrics", ContainerPort: status, Protocol: corev1.ProtocolTCP,
		}},
		Args:            b.proxyArgs("sidecar"),
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
// certificates. It merges as Istio does: its template is laid over the
// container, then the container's own settings are laid back over that,
// so a variable or mount path the app sets itself keeps the app's value.
func wireGRPCApps(pod *corev1.Pod) {
	envKey := func(e corev1.EnvVar) string { return e.Name }
	mountKey := func(m corev1.VolumeMount) string { return m.MountPath }
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name == ProxyContainerName {
			continue
		}
		env := mergeByKey(c.Env, []corev1.EnvVar{
			valueEnv("GRPC_XDS_EXPERIMENTAL_SECURITY_SUPPORT", "true"),
			valueEnv("GRPC_XDS_BOOTSTRAP", grpcBootstrap),
		}, envKey)
		c.Env = mergeByKey(env, c.Env, envKey)
		mounts := mergeByKey(c.VolumeMounts, grpcAppMounts(), mountKey)
		c.VolumeMounts = mergeByKey(mounts, c.VolumeMounts, mountKey)
	}
}
