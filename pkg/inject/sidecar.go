package inject

import (
	"encoding/json"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names of what the injector adds, as Istio names them.
const (
	ProxyContainerName = "istio-proxy"
	InitContainerName  = "istio-init"

	proxyUID       = 1337
	readinessPort  = 15021
	envoyPromPort  = 15090
	redirectPort   = "15001"
	inboundPort    = "15006"
	grpcBootstrap  = "/etc/istio/proxy/grpc-bootstrap.json"
	outputCertsDir = "/var/lib/istio/data"
)

// builder assembles the injected objects from validated inputs only.
type builder struct {
	pod       *corev1.Pod
	namespace string
	values    *Values
	set       *settings
	work      workload
	clusterID string
	network   string
}

// restrictedContext is the security context of every istio-proxy.
func restrictedContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		Privileged:               ptrTo(false),
		ReadOnlyRootFilesystem:   ptrTo(true),
		RunAsGroup:               ptrTo[int64](proxyUID),
		RunAsNonRoot:             ptrTo(true),
		RunAsUser:                ptrTo[int64](proxyUID),
	}
}

func (b *builder) appContainerNames() []string {
	names := make([]string, 0, len(b.pod.Spec.Containers))
	for _, c := range b.pod.Spec.Containers {
		if c.Name != ProxyContainerName {
			names = append(names, c.Name)
		}
	}
	return names
}

// proxyArgs are pilot-agent's arguments; role is "sidecar" or "router".
func (b *builder) proxyArgs(role string) []string {
	g := &b.values.Global
	args := []string{
		"proxy", role,
		"--domain", "$(POD_NAMESPACE).svc." + g.Proxy.ClusterDomain,
		"--proxyLogLevel=" + b.set.logLevel,
		"--proxyComponentLogLevel=" + g.Proxy.ComponentLogLevel,
		"--log_output_level=" + g.Logging.Level,
	}
	if g.LogAsJSON {
		args = append(args, "--log_as_json")
	}
	return args
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// resourceEnv exposes a container resource; the divisor is written out as
// Istio's template writes it.
func resourceEnv(name, res string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
		Resource: res, Divisor: resource.MustParse("1"),
	}}}
}

func valueEnv(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// podPortsJSON is ISTIO_META_POD_PORTS: the app containers' ports. The
// gateway template lists the ports of every container of the pod as it
// came, its own istio-proxy included.
func (b *builder) podPortsJSON() string {
	ports := []corev1.ContainerPort{}
	for _, c := range b.pod.Spec.Containers {
		if c.Name != ProxyContainerName || b.set.template == TemplateGateway {
			ports = append(ports, c.Ports...)
		}
	}
	out, err := json.Marshal(ports)
	if err != nil { // plain structs of strings and ints: cannot fail
		return "[]"
	}
	return string(out)
}

func (b *builder) clusterName() string {
	return firstNonEmpty(b.clusterID, b.values.Global.MultiCluster.ClusterName, "Kubernetes")
}

// networkName is the pod's topology.istio.io/network label, else the
// network of the URL path, else the values', in Istio's precedence.
func (b *builder) networkName() string {
	label := b.pod.Labels[LabelNetwork]
	if validateLabelValue(label) != nil {
		label = "" // not a valid label: the pod fails validation anyway
	}
	return firstNonEmpty(label, b.network, b.values.Global.Network)
}

// clusterEnv is what Istio's injector writes last in istio-proxy's
// environment: the cluster and the network, when either is configured
// rather than defaulted.
func (b *builder) clusterEnv() []corev1.EnvVar {
	var env []corev1.EnvVar
	if c := firstNonEmpty(b.clusterID, b.values.Global.MultiCluster.ClusterName); c != "" {
		env = append(env, valueEnv("ISTIO_META_CLUSTER_ID", c))
	}
	if n := b.networkName(); n != "" {
		env = append(env, valueEnv("ISTIO_META_NETWORK", n))
	}
	return env
}

// commonEnv is shared by the sidecar and the gRPC agent; the agent alone
// has no Envoy, so no interception mode and no Go runtime limits for it.
func (b *builder) commonEnv(sidecar bool) []corev1.EnvVar {
	env := b.podEnv()
	if sidecar {
		env = append(env, resourceEnv("ISTIO_CPU_LIMIT", "limits.cpu"))
	}
	env = append(env,
		valueEnv("PROXY_CONFIG", b.set.proxy.json),
		valueEnv("ISTIO_META_POD_PORTS", b.podPortsJSON()),
		valueEnv("ISTIO_META_APP_CONTAINERS", strings.Join(b.appContainerNames(), ",")))
	if sidecar {
		env = append(env,
			resourceEnv("GOMEMLIMIT", "limits.memory"),
			resourceEnv("GOMAXPROCS", "limits.cpu"))
	}
	if firstNonEmpty(b.clusterID, b.values.Global.MultiCluster.ClusterName) == "" {
		env = append(env, valueEnv("ISTIO_META_CLUSTER_ID", b.clusterName()))
	}
	env = append(env, fieldEnv("ISTIO_META_NODE_NAME", "spec.nodeName"))
	if sidecar {
		env = append(env, valueEnv("ISTIO_META_INTERCEPTION_MODE", b.set.proxy.mode.String()))
	}
	return append(env, b.identityEnv(sidecar)...)
}

// podEnv is what every istio-proxy reads first: the CA and the pod's own
// coordinates.
func (b *builder) podEnv() []corev1.EnvVar {
	v := b.values
	return []corev1.EnvVar{
		valueEnv("PILOT_CERT_PROVIDER", v.Global.PilotCertProvider),
		valueEnv("CA_ADDR", v.CAAddress()),
		fieldEnv("POD_NAME", "metadata.name"),
		fieldEnv("POD_NAMESPACE", "metadata.namespace"),
		fieldEnv("INSTANCE_IP", "status.podIP"),
		fieldEnv("SERVICE_ACCOUNT", "spec.serviceAccountName"),
		fieldEnv("HOST_IP", "status.hostIP"),
	}
}

// identityEnv names the workload, its owner and its mesh, then adds the
// proxy metadata. Only the sidecar takes the workload name from the pod's
// service.istio.io/workload-name label, as Istio does.
func (b *builder) identityEnv(workloadLabel bool) []corev1.EnvVar {
	v := b.values
	var env []corev1.EnvVar
	if b.work.name != "" {
		name := b.work.name
		if l := b.pod.Labels[LabelWorkloadName]; workloadLabel && l != "" && validateLabelValue(l) == nil {
			name = l
		}
		env = append(env,
			valueEnv("ISTIO_META_WORKLOAD_NAME", name),
			valueEnv("ISTIO_META_OWNER", b.work.owner()))
	}
	td := v.TrustDomain()
	if mesh := firstNonEmpty(v.Global.MeshID, td); mesh != "" {
		env = append(env, valueEnv("ISTIO_META_MESH_ID", mesh))
	}
	if td != "" {
		env = append(env, valueEnv("TRUST_DOMAIN", td))
	}
	for _, m := range b.set.proxy.metadata {
		env = append(env, valueEnv(m.name, m.value))
	}
	return env
}

func httpProbe(path string, port int) corev1.ProbeHandler {
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}}
}

func (b *builder) readinessProbe() *corev1.Probe {
	p := &b.values.Global.Proxy
	return &corev1.Probe{
		ProbeHandler:        httpProbe("/healthz/ready", readinessPort),
		InitialDelaySeconds: p.ReadinessInitialDelaySeconds,
		PeriodSeconds:       p.ReadinessPeriodSeconds,
		TimeoutSeconds:      3,
		FailureThreshold:    p.ReadinessFailureThreshold,
	}
}

func (b *builder) startupProbe() *corev1.Probe {
	p := &b.values.Global.Proxy
	if !p.StartupProbe.Enabled {
		return nil
	}
	return &corev1.Probe{
		ProbeHandler:     httpProbe("/healthz/ready", readinessPort),
		PeriodSeconds:    1,
		TimeoutSeconds:   3,
		FailureThreshold: p.StartupProbe.FailureThreshold,
	}
}

// lifecycle: hold the app until the proxy is ready, or for a native sidecar
// drain on shutdown, as Istio does.
func (b *builder) lifecycle() *corev1.Lifecycle {
	switch {
	case b.set.native:
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{
			"pilot-agent", "request", "--debug-port=" + strconv.Itoa(int(b.values.Global.Proxy.StatusPort)), "POST", "drain",
		}}}}
	case b.set.proxy.hold:
		return &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"pilot-agent", "wait"}}}}
	}
	return nil
}

// proxyContainer is istio-proxy for the sidecar template.
func (b *builder) proxyContainer() corev1.Container {
	c := corev1.Container{
		Name:  ProxyContainerName,
		Image: b.set.image,
		Ports: []corev1.ContainerPort{{
			Name: "http-envoy-prom", ContainerPort: envoyPromPort, Protocol: corev1.ProtocolTCP,
		}},
		Args:            b.proxyArgs("sidecar"),
		Env:             append(b.commonEnv(true), b.clusterEnv()...),
		ImagePullPolicy: corev1.PullPolicy(b.values.Global.ImagePullPolicy),
		ReadinessProbe:  b.readinessProbe(),
		StartupProbe:    b.startupProbe(),
		Lifecycle:       b.lifecycle(),
		Resources:       *b.set.resources.DeepCopy(),
		SecurityContext: restrictedContext(),
		VolumeMounts:    sidecarMounts(),
	}
	if b.set.native {
		c.RestartPolicy = ptrTo(corev1.ContainerRestartPolicyAlways)
	}
	return c
}

// initContainer is istio-init: it programs iptables, so it alone runs as
// root with NET_ADMIN and NET_RAW.
func (b *builder) initContainer() corev1.Container {
	s := b.set
	excludeIn := "15090,15021"
	if extra := excludeInboundPorts(b.values.Global.Proxy.StatusPort, s.excludeInboundPorts); extra != "" {
		excludeIn += "," + extra
	}
	args := []string{
		"istio-iptables",
		"-p", redirectPort,
		"-z", inboundPort,
		"-u", strconv.Itoa(proxyUID),
		"-m", s.proxy.mode.String(),
		"-i", s.includeIPRanges,
		"-x", s.excludeIPRanges,
		"-b", s.includeInboundPorts,
		"-d", excludeIn,
	}
	if s.excludeOutboundPorts != "" {
		args = append(args, "-o", s.excludeOutboundPorts)
	}
	args = append(args, "--log_output_level="+b.values.Global.Logging.Level)
	if b.values.Global.LogAsJSON {
		args = append(args, "--log_as_json")
	}
	var env []corev1.EnvVar
	for _, m := range s.proxy.metadata {
		env = append(env, valueEnv(m.name, m.value))
	}
	return corev1.Container{
		Name:            InitContainerName,
		Image:           s.initImage,
		Args:            args,
		Env:             env,
		ImagePullPolicy: corev1.PullPolicy(b.values.Global.ImagePullPolicy),
		Resources:       *s.resources.DeepCopy(),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptrTo(false),
			Privileged:               ptrTo(false),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				Drop: []corev1.Capability{"ALL"},
			},
			ReadOnlyRootFilesystem: ptrTo(false),
			RunAsGroup:             ptrTo[int64](0),
			RunAsNonRoot:           ptrTo(false),
			RunAsUser:              ptrTo[int64](0),
		},
	}
}

// excludeInboundPorts appends the agent's status port to the user's list,
// as Istio's excludeInboundPort helper does.
func excludeInboundPorts(statusPort int32, list string) string {
	sp := strconv.Itoa(int(statusPort))
	if list == "" {
		return sp
	}
	for _, p := range strings.Split(list, ",") {
		if p == sp {
			return list
		}
	}
	return list + "," + sp
}

func ptrTo[T any](v T) *T { return &v }
