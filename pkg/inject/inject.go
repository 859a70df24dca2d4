package inject

import (
	"encoding/json"
	"errors"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// Params is everything Inject needs besides the pod. It is plain data:
// the caller reads the Store, the request and the URL path.
type Params struct {
	// Namespace is the admission request's namespace; it is used when the
	// pod object has none, which is usual at creation.
	Namespace string
	// NamespaceLabels are the labels of the pod's namespace, when known.
	NamespaceLabels map[string]string
	Config          *Config
	Values          *Values
	// Mesh, when set, is the mesh configuration as istiod watches it (the
	// istio ConfigMap's "mesh"): as in Istio, the injector reads its
	// trustDomain, enablePrometheusMerge and defaultConfig (the discovery
	// address among them) from it instead of the values' meshConfig.
	Mesh *meshv1alpha1.MeshConfig
	// ClusterID and Network come from /inject/cluster/<id>/net/<network>
	// and take precedence over the values when set.
	ClusterID string
	Network   string
}

// Result says what Inject did and why.
type Result struct {
	Injected bool
	Reason   string
	Patch    []jsonpatch.Operation
}

// ErrConflict is returned for pods that already carry objects with the
// names the injector adds.
var ErrConflict = errors.New("pod already defines an object the injector adds")

// Inject decides whether pod gets the sidecar and returns the JSON patch
// that adds it. It does not modify pod. An error means admission must be
// denied; an *AnnotationError names the offending annotation.
func Inject(pod *corev1.Pod, p Params) (Result, error) {
	mutated, res, err := Mutate(pod, p)
	if err != nil || !res.Injected {
		return res, err
	}
	res.Patch, err = createPatch(pod, mutated)
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// Mutate is Inject without the patch: it returns the injected copy of pod
// (nil when the pod is not injected).
func Mutate(pod *corev1.Pod, p Params) (*corev1.Pod, Result, error) {
	if pod == nil {
		return nil, Result{}, errors.New("inject: no pod")
	}
	if p.Config == nil || p.Values == nil {
		return nil, Result{}, errors.New("inject: no injector config")
	}
	if p.Mesh != nil {
		if err := CheckMeshConfig(p.Mesh); err != nil {
			return nil, Result{}, fmt.Errorf("inject: mesh config: %w", err)
		}
		vals := *p.Values
		vals.mesh = p.Mesh
		p.Values = &vals
	}
	ns := firstNonEmpty(pod.Namespace, p.Namespace)
	ok, reason := decide(pod, ns, p.NamespaceLabels, p.Config)
	if !ok {
		return nil, Result{Reason: reason}, nil
	}
	set, err := resolveSettings(pod.Annotations, p.Config, p.Values)
	if err != nil {
		return nil, Result{Reason: reason}, err
	}
	if err := checkConflicts(pod, set.template); err != nil {
		return nil, Result{Reason: reason}, err
	}
	out := pod.DeepCopy()
	b := &builder{
		pod: out, namespace: ns, values: p.Values, set: set,
		work: workloadOf(pod, ns), clusterID: p.ClusterID, network: p.Network,
	}
	var st status
	switch set.template {
	case TemplateGRPCAgent:
		st, err = b.applyGRPCAgent()
	case TemplateGateway:
		st, err = b.applyGateway()
	default:
		st, err = b.applySidecar()
	}
	if err != nil {
		return nil, Result{Reason: reason}, err
	}
	b.applyPodMetadata(p.Config, st)
	return out, Result{Injected: true, Reason: reason}, nil
}

// applySidecar adds istio-init (unless interception is off) and istio-proxy,
// as a native sidecar init container when asked.
func (b *builder) applySidecar() (status, error) {
	pod, s := b.pod, b.set
	proxy := b.proxyContainer()
	// Istio's order: the Prometheus settings, then the app's probes.
	if e, ok := prometheusMerge(pod, b.values); ok {
		proxy.Env = append(proxy.Env, e...)
	}
	if s.rewriteProbes {
		probers, err := rewriteProbes(pod, b.values.Global.Proxy.StatusPort, s)
		if err != nil {
			return status{}, err
		}
		if probers != "" {
			proxy.Env = append(proxy.Env, valueEnv(EnvAppProbers, probers))
		}
	}

	var st status
	var inits []corev1.Container
	if s.proxy.mode.String() != "NONE" {
		inits = append(inits, b.initContainer())
		st.InitContainers = append(st.InitContainers, InitContainerName)
	}
	if s.native {
		inits = append(inits, proxy)
		st.InitContainers = append(st.InitContainers, ProxyContainerName)
	} else {
		st.Containers = []string{ProxyContainerName}
		if s.proxy.hold {
			pod.Spec.Containers = append([]corev1.Container{proxy}, pod.Spec.Containers...)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, proxy)
		}
	}
	switch {
	case s.native:
		// istio-init, then istio-proxy, then the pod's own: the pod's init
		// containers run inside the mesh.
		pod.Spec.InitContainers = append(inits, pod.Spec.InitContainers...)
	case len(inits) > 0:
		// istio-init last, so the pod's own init containers run before
		// traffic is captured.
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, inits...)
	}
	vols := sidecarVolumes(b.values)
	pod.Spec.Volumes = mergeByKey(pod.Spec.Volumes, vols, volumeKey)
	st.Volumes = volumeNames(vols)

	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[LabelTLSMode] = firstNonEmpty(pod.Labels[LabelTLSMode], "istio")
	return st, nil
}

// applyGRPCAgent adds the agent-only istio-proxy for proxyless gRPC.
func (b *builder) applyGRPCAgent() (status, error) {
	pod := b.pod
	var st status
	st.Containers = append([]string{ProxyContainerName}, b.appContainerNames()...)
	agent := b.grpcAgentContainer()
	if e, ok := prometheusMerge(pod, b.values); ok {
		agent.Env = append(agent.Env, e...)
	}
	wireGRPCApps(pod)
	// Like the sidecar, the agent goes last unless the app must wait for it.
	if b.set.proxy.hold {
		pod.Spec.Containers = append([]corev1.Container{agent}, pod.Spec.Containers...)
	} else {
		pod.Spec.Containers = append(pod.Spec.Containers, agent)
	}
	vols := grpcAgentVolumes(b.values)
	pod.Spec.Volumes = mergeByKey(pod.Spec.Volumes, vols, volumeKey)
	st.Volumes = volumeNames(vols)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationRewriteProbers] = "false"
	return st, nil
}

// applyPodMetadata sets the labels and annotations every template adds.
func (b *builder) applyPodMetadata(cfg *Config, st status) {
	pod, v := b.pod, b.values
	if len(v.Global.ImagePullSecrets) > 0 {
		refs := make([]corev1.LocalObjectReference, 0, len(v.Global.ImagePullSecrets))
		for _, name := range v.Global.ImagePullSecrets {
			if !hasPullSecret(refs, name) {
				refs = append(refs, corev1.LocalObjectReference{Name: name})
			}
			st.ImagePullSecrets = append(st.ImagePullSecrets, name)
		}
		pod.Spec.ImagePullSecrets = mergeByKey(pod.Spec.ImagePullSecrets, refs,
			func(r corev1.LocalObjectReference) string { return r.Name })
	}
	st.Revision = firstNonEmpty(v.Revision, "default")

	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[LabelCanonicalName] = canonicalName(pod.Labels, b.work)
	pod.Labels[LabelCanonicalRevision] = canonicalRevision(pod.Labels)
	if n := b.networkName(); n != "" {
		pod.Labels[LabelNetwork] = n
	}

	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationRevision] = st.Revision
	if apps := b.appContainerNames(); len(apps) > 0 {
		if _, ok := pod.Annotations[AnnotationDefaultLogs]; !ok {
			pod.Annotations[AnnotationDefaultLogs] = apps[0]
		}
		if _, ok := pod.Annotations[AnnotationDefaultContainer]; !ok {
			pod.Annotations[AnnotationDefaultContainer] = apps[0]
		}
	}
	for k, val := range cfg.InjectedAnnotations {
		pod.Annotations[k] = val
	}
	pod.Annotations[AnnotationStatus] = st.encode()
}

// status is the sidecar.istio.io/status annotation, in Istio's format.
type status struct {
	InitContainers   []string `json:"initContainers"`
	Containers       []string `json:"containers"`
	Volumes          []string `json:"volumes"`
	ImagePullSecrets []string `json:"imagePullSecrets"`
	Revision         string   `json:"revision"`
}

func (s status) encode() string {
	b, err := json.Marshal(s)
	if err != nil { // slices of strings: cannot fail
		return "{}"
	}
	return string(b)
}

func volumeKey(v corev1.Volume) string { return v.Name }

func volumeNames(vols []corev1.Volume) []string {
	out := make([]string, len(vols))
	for i, v := range vols {
		out[i] = v.Name
	}
	return out
}

func hasPullSecret(refs []corev1.LocalObjectReference, name string) bool {
	for _, r := range refs {
		if r.Name == name {
			return true
		}
	}
	return false
}

// reservedVolumes are the volume names the templates add.
var reservedVolumes = map[string]bool{
	volWorkloadSocket: true, volCredentialSocket: true, volWorkloadCerts: true, volEnvoy: true,
	volXDS: true, volData: true, volPodInfo: true, volToken: true, volCACert: true,
}

// checkConflicts refuses pods that already define istio-proxy, istio-init
// or one of the injected volumes: merging over them could change the
// sidecar's privileges, and a duplicate name fails pod validation anyway.
// The gateway template alone takes the pod's own istio-proxy container
// (one, among the containers), as the gateway chart writes it.
func checkConflicts(pod *corev1.Pod, template string) error {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == ProxyContainerName || c.Name == InitContainerName {
			return fmt.Errorf("init container %s: %w", c.Name, ErrConflict)
		}
	}
	proxies := 0
	for _, c := range pod.Spec.Containers {
		switch {
		case c.Name == InitContainerName,
			c.Name == ProxyContainerName && template != TemplateGateway:
			return fmt.Errorf("container %s: %w", c.Name, ErrConflict)
		case c.Name == ProxyContainerName:
			if proxies++; proxies > 1 {
				return fmt.Errorf("a second container %s: %w", c.Name, ErrConflict)
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		if reservedVolumes[v.Name] {
			return fmt.Errorf("volume %s: %w", v.Name, ErrConflict)
		}
	}
	return nil
}
