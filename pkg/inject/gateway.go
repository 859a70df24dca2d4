package inject

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation"
)

// AutoImage is the image a pod gives its own istio-proxy container to let
// the injector choose it, as Istio's gateway chart does.
const AutoImage = "auto"

// unprivilegedPortSysctl lets the gateway, which runs as user 1337, listen
// on ports below 1024 (80 and 443).
const unprivilegedPortSysctl = "net.ipv4.ip_unprivileged_port_start"

// applyGateway adds istio-proxy as a gateway: Envoy in router mode, with
// no istio-init and no traffic capture. The pod may carry its own
// istio-proxy container (the gateway chart's, image "auto"): it is laid
// over the template as Istio lays it, so the chart's ports, environment,
// resources and security settings win.
func (b *builder) applyGateway() (status, error) {
	pod := b.pod
	proxy := b.gatewayContainer()
	if i := slices.IndexFunc(pod.Spec.Containers, isProxy); i >= 0 {
		merged, err := overlayContainer(proxy, pod.Spec.Containers[i])
		if err != nil {
			return status{}, err
		}
		proxy = merged
		pod.Spec.Containers = slices.Delete(pod.Spec.Containers, i, i+1)
	}
	// Istio writes the cluster and the network of the URL path or the
	// values last, over whatever the pod's own container said.
	cluster := b.clusterEnv()
	proxy.Env = slices.DeleteFunc(proxy.Env, func(e corev1.EnvVar) bool {
		return slices.ContainsFunc(cluster, func(c corev1.EnvVar) bool { return c.Name == e.Name })
	})
	proxy.Env = append(proxy.Env, cluster...)

	if e, ok := prometheusMerge(pod, b.values); ok {
		proxy.Env = append(proxy.Env, e...)
	}
	if b.set.rewriteProbes {
		probers, err := rewriteProbes(pod, b.values.Global.Proxy.StatusPort, b.set)
		if err != nil {
			return status{}, err
		}
		if probers != "" {
			proxy.Env = append(proxy.Env, valueEnv(EnvAppProbers, probers))
		}
	}
	if b.set.proxy.hold {
		pod.Spec.Containers = append([]corev1.Container{proxy}, pod.Spec.Containers...)
	} else {
		pod.Spec.Containers = append(pod.Spec.Containers, proxy)
	}

	if pod.Spec.SecurityContext == nil {
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	// As in Istio's template, the list replaces the pod's own sysctls.
	pod.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: unprivilegedPortSysctl, Value: "0"}}

	vols := sidecarVolumes(b.values)
	pod.Spec.Volumes = mergeByKey(pod.Spec.Volumes, vols, volumeKey)
	return status{Containers: []string{ProxyContainerName}, Volumes: volumeNames(vols)}, nil
}

// gatewayContainer is the gateway template's istio-proxy, before the pod's
// own container is laid over it.
func (b *builder) gatewayContainer() corev1.Container {
	env := b.podEnv()
	env = append(env,
		resourceEnv("ISTIO_CPU_LIMIT", "limits.cpu"),
		valueEnv("PROXY_CONFIG", b.set.proxy.json),
		valueEnv("ISTIO_META_POD_PORTS", b.podPortsJSON()),
		resourceEnv("GOMEMLIMIT", "limits.memory"),
		resourceEnv("GOMAXPROCS", "limits.cpu"),
		valueEnv("ISTIO_META_APP_CONTAINERS", strings.Join(b.appContainerNames(), ",")),
	)
	if firstNonEmpty(b.clusterID, b.values.Global.MultiCluster.ClusterName) == "" {
		env = append(env, valueEnv("ISTIO_META_CLUSTER_ID", b.clusterName()))
	}
	env = append(env,
		fieldEnv("ISTIO_META_NODE_NAME", "spec.nodeName"),
		valueEnv("ISTIO_META_INTERCEPTION_MODE", b.set.proxy.mode.String()))
	env = append(env, b.identityEnv(false)...)
	return corev1.Container{
		Name:  ProxyContainerName,
		Image: b.set.image,
		Ports: []corev1.ContainerPort{{
			Name: "http-envoy-prom", ContainerPort: envoyPromPort, Protocol: corev1.ProtocolTCP,
		}},
		Args:            b.proxyArgs("router"),
		Env:             env,
		ImagePullPolicy: corev1.PullPolicy(b.values.Global.ImagePullPolicy),
		ReadinessProbe:  b.readinessProbe(),
		SecurityContext: restrictedContext(),
		VolumeMounts:    sidecarMounts(),
	}
}

func isProxy(c corev1.Container) bool { return c.Name == ProxyContainerName }

// overlayContainer lays the pod's own container over the template's the
// way Istio does: the template is merged over the pod's container, then
// the pod's container over the result, both as Kubernetes strategic merge
// patches (environment by name, ports by number, mounts by path; every
// field the pod sets wins). Image "auto" leaves the template's image.
func overlayContainer(tmpl, own corev1.Container) (corev1.Container, error) {
	if err := checkOwnProxy(own); err != nil {
		return corev1.Container{}, err
	}
	over := *own.DeepCopy()
	if over.Image == AutoImage {
		over.Image = ""
	}
	merged, err := mergeContainer(own, tmpl)
	if err != nil {
		return corev1.Container{}, err
	}
	if merged, err = mergeContainer(merged, over); err != nil {
		return corev1.Container{}, err
	}
	return merged, nil
}

func mergeContainer(base, patch corev1.Container) (corev1.Container, error) {
	b, err := json.Marshal(base)
	if err != nil {
		return corev1.Container{}, fmt.Errorf("encode container: %w", err)
	}
	p, err := json.Marshal(patch)
	if err != nil {
		return corev1.Container{}, fmt.Errorf("encode container: %w", err)
	}
	out, err := strategicpatch.StrategicMergePatch(b, p, corev1.Container{})
	if err != nil {
		return corev1.Container{}, fmt.Errorf("merge istio-proxy: %w", err)
	}
	var c corev1.Container
	if err := json.Unmarshal(out, &c); err != nil {
		return corev1.Container{}, fmt.Errorf("decode merged istio-proxy: %w", err)
	}
	return c, nil
}

// errOwnProxy is an istio-proxy container of the pod that cannot be laid
// over the template.
var errOwnProxy = errors.New("the pod's istio-proxy container")

// maxOwnListItems bounds each merged list of the pod's istio-proxy: a
// strategic merge matches list items pairwise, so its time grows with the
// square of their number (20,000 variables take minutes).
const maxOwnListItems = 128

// checkOwnProxy refuses what the merge cannot take: lists longer than
// maxOwnListItems, and what a strategic merge would read as a directive
// rather than data (the container's only maps with keys the pod chooses
// are its resource lists, and a key there must be a resource name).
func checkOwnProxy(c corev1.Container) error {
	for _, l := range []struct {
		name string
		n    int
	}{
		{"env", len(c.Env)}, {"envFrom", len(c.EnvFrom)}, {"ports", len(c.Ports)},
		{"volumeMounts", len(c.VolumeMounts)}, {"volumeDevices", len(c.VolumeDevices)},
		{"resizePolicy", len(c.ResizePolicy)}, {"resources.claims", len(c.Resources.Claims)},
	} {
		if l.n > maxOwnListItems {
			return fmt.Errorf("%w: %d items in %s, at most %d", errOwnProxy, l.n, l.name, maxOwnListItems)
		}
	}
	for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name := range list {
			if errs := validation.IsQualifiedName(string(name)); len(errs) > 0 {
				return fmt.Errorf("%w: resource %.60q: %s", errOwnProxy, name, errs[0])
			}
		}
	}
	return nil
}
