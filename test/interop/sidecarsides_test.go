package interop

import (
	"context"
	"errors"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	meshconfig "istio.io/api/mesh/v1alpha1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config/mesh"
	istiolog "istio.io/istio/pkg/log"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// snapshotTimeout bounds the wait for kubesource's first snapshot.
const snapshotTimeout = 30 * time.Second

// istioServer is Istio's own generator (the fake discovery server of
// pilot/test/xds, with its Kubernetes registry) over sidecarWorld and the
// scenario's configuration.
func istioServer(t *testing.T, sc sidecarScenario) *xds.FakeDiscoveryServer {
	t.Helper()
	cfgs, _, err := crd.ParseInputs(sc.istio)
	if err != nil {
		t.Fatalf("crd.ParseInputs: %v", err)
	}
	// Istio's Kubernetes config client stamps every object with the
	// cluster's domain suffix, which short DestinationRule hosts resolve
	// with (model.ResolveShortnameToFQDN); ParseInputs leaves it empty.
	for i := range cfgs {
		cfgs[i].Domain = "cluster.local"
	}
	opts := xds.FakeOptions{Configs: cfgs, KubernetesObjectString: sidecarWorld}
	if sc.registryOnly || sc.tlsDefaults[0] != nil || sc.tlsDefaults[1] != nil || sc.defaultServiceExportTo != nil {
		m := mesh.DefaultMeshConfig()
		if sc.defaultServiceExportTo != nil {
			m.DefaultServiceExportTo = sc.defaultServiceExportTo
		}
		if sc.registryOnly {
			m.OutboundTrafficPolicy = &meshconfig.MeshConfig_OutboundTrafficPolicy{
				Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY,
			}
		}
		if sc.tlsDefaults[0] != nil || sc.tlsDefaults[1] != nil {
			m.TlsDefaults = &meshconfig.MeshConfig_TLSConfig{EcdhCurves: sc.tlsDefaults[0], CipherSuites: sc.tlsDefaults[1]}
		}
		opts.MeshConfig = m
	}
	return xds.NewFakeDiscoveryServer(t, opts)
}

// quietIstioLogs keeps Istio's discovery server from logging below
// warnings to the test binary's output while the test runs: its
// informational lines would drown the test's report.
func quietIstioLogs(t testing.TB) {
	for _, s := range istiolog.Scopes() {
		level := s.GetOutputLevel()
		if level > istiolog.WarnLevel {
			s.SetOutputLevel(istiolog.WarnLevel)
			t.Cleanup(func() { s.SetOutputLevel(level) })
		}
	}
}

// istioProxy is the sidecar of pod as Istio knows it: the node metadata
// pilot-agent sends, with the pod's labels (in Kubernetes istiod takes them
// from the Pod found by its IP; the fake server does not, so they are given).
func istioProxy(s *xds.FakeDiscoveryServer, pod *corev1.Pod) *istiomodel.Proxy {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return s.SetupProxy(&istiomodel.Proxy{
		ID:              pod.Name + "." + pod.Namespace,
		ConfigNamespace: pod.Namespace,
		IPAddresses:     []string{pod.Status.PodIP},
		Labels:          pod.Labels,
		Metadata: &istiomodel.NodeMetadata{
			Namespace:      pod.Namespace,
			ServiceAccount: sa,
			Labels:         pod.Labels,
		},
	})
}

// sidecarResources is one sidecar's xDS resources.
type sidecarResources struct {
	listeners []*listenerv3.Listener
	clusters  []*clusterv3.Cluster
	routes    []*routev3.RouteConfiguration
	endpoints []*endpointv3.ClusterLoadAssignment
}

// ourSnapshot runs our Kubernetes model source, kubesource, over fake
// clientsets holding the Kubernetes objects and the Istio configuration
// YAML, and returns the first snapshot it publishes from synced caches.
func ourSnapshot(t testing.TB, objects []runtime.Object, istioYAML string) *model.Snapshot {
	t.Helper()
	store := model.NewStore()
	stop := runKubesource(t, objects, istioYAML, kubesource.Config{Publisher: store})
	defer stop()
	return store.Current()
}

// runKubesource runs kubesource, configured as cfg, over fake clientsets
// holding the Kubernetes objects and the Istio configuration YAML, until
// it has published a snapshot from synced caches; stop stops it.
func runKubesource(t testing.TB, objects []runtime.Object, istioYAML string, cfg kubesource.Config) (stop func()) {
	t.Helper()
	kube := kubefake.NewClientset(objects...)
	// Discovery serves the Istio CRDs kubesource watches, as an apiserver
	// with Istio's CRDs installed does.
	kube.Resources = []*metav1.APIResourceList{{
		GroupVersion: "security.istio.io/v1",
		APIResources: []metav1.APIResource{
			{Name: "peerauthentications", Namespaced: true, Kind: "PeerAuthentication"},
			{Name: "authorizationpolicies", Namespaced: true, Kind: "AuthorizationPolicy"},
			{Name: "requestauthentications", Namespaced: true, Kind: "RequestAuthentication"},
		},
	}, {
		GroupVersion: "networking.istio.io/v1",
		APIResources: []metav1.APIResource{
			{Name: "destinationrules", Namespaced: true, Kind: "DestinationRule"},
			{Name: "serviceentries", Namespaced: true, Kind: "ServiceEntry"},
			{Name: "gateways", Namespaced: true, Kind: "Gateway"},
			{Name: "virtualservices", Namespaced: true, Kind: "VirtualService"},
			{Name: "sidecars", Namespaced: true, Kind: "Sidecar"},
		},
	}, {
		GroupVersion: "telemetry.istio.io/v1",
		APIResources: []metav1.APIResource{{Name: "telemetries", Namespaced: true, Kind: "Telemetry"}},
	}}
	istio := istiofake.NewSimpleClientset()
	for _, o := range decodeIstio(t, istioYAML) {
		// The fake's Add guesses a kind's resource by its English plural,
		// "gatewaies" for Gateway; the resource is named here.
		if gw, ok := o.(*istionetworkingv1.Gateway); ok {
			gvr := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "gateways"}
			if err := istio.Tracker().Create(gvr, gw, gw.Namespace); err != nil {
				t.Fatalf("add Gateway %s/%s: %v", gw.Namespace, gw.Name, err)
			}
			continue
		}
		if err := istio.Tracker().Add(o); err != nil {
			t.Fatalf("add %T: %v", o, err)
		}
	}
	// Istio's fake clientset does not implement watch-list, which
	// client-go's informers try first; refusing it makes them list and
	// watch.
	istio.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, ok := a.(interface{ GetListOptions() metav1.ListOptions })
		if ok && w.GetListOptions().SendInitialEvents != nil && *w.GetListOptions().SendInitialEvents {
			return true, nil, apierrors.NewBadRequest("watch-list is not supported")
		}
		return false, nil, nil
	})
	_, logger := logtest.New(t)
	cfg.Client, cfg.Istio, cfg.Logger = kube, istio, logger
	src, err := kubesource.New(cfg)
	if err != nil {
		t.Fatalf("kubesource.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("kubesource Run: %v", err)
		}
	}
	synced := false
	defer func() {
		if !synced { // failed: stop it all the same
			cancel()
		}
	}()
	for deadline := time.Now().Add(snapshotTimeout); !src.HasSynced(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("kubesource published no synced snapshot in %v", snapshotTimeout)
		}
		select {
		case err := <-done:
			t.Fatalf("kubesource Run ended before it synced: %v", err)
		default:
		}
	}
	synced = true
	return stop
}

// ourConfig is what our generator, envoygen, gives the sidecar of pod:
// every resource of the four types, asked for by wildcard, built. A
// resource that fails to build, or whose name is not the one it was
// announced with, fails the test and is left out.
func ourConfig(t *testing.T, snap *model.Snapshot, sc sidecarScenario, pod *corev1.Pod) *sidecarResources {
	t.Helper()
	g := &envoygen.Generator{
		TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain),
		Mesh: envoygen.Mesh{RegistryOnly: sc.registryOnly, AllowInsecureSkipVerify: sc.allowInsecureSkipVerify,
			TLSDefaults: envoygen.TLSDefaults{ECDHCurves: sc.tlsDefaults[0], CipherSuites: sc.tlsDefaults[1]}},
	}
	p := &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}}
	return ourResources(t, g, snap, p)
}

// ourResources is every resource g gives p in snap, of the four types,
// asked for by wildcard, built. A resource that fails to build, or whose
// name is not the one it was announced with, fails the test and is left
// out.
func ourResources(t *testing.T, g *envoygen.Generator, snap *model.Snapshot, p *envoygen.Proxy) *sidecarResources {
	t.Helper()
	var cfg sidecarResources
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		for _, r := range g.Generate(snap, p, typeURL, nil, true) {
			msg, err := r.Message(typeURL)
			if err != nil {
				t.Errorf("envoygen: Build of %s %q: %v", shortType(typeURL), r.Name, err)
				continue
			}
			name := ""
			switch m := msg.(type) {
			case *listenerv3.Listener:
				name = m.GetName()
				cfg.listeners = append(cfg.listeners, m)
			case *clusterv3.Cluster:
				name = m.GetName()
				cfg.clusters = append(cfg.clusters, m)
			case *routev3.RouteConfiguration:
				name = m.GetName()
				cfg.routes = append(cfg.routes, m)
			case *endpointv3.ClusterLoadAssignment:
				name = m.GetClusterName()
				cfg.endpoints = append(cfg.endpoints, m)
			default:
				t.Errorf("envoygen: %s %q built a %T", shortType(typeURL), r.Name, msg)
				continue
			}
			if name != r.Name {
				t.Errorf("envoygen: %s announced as %q is named %q", shortType(typeURL), r.Name, name)
			}
		}
	}
	return &cfg
}

func shortType(typeURL string) string {
	switch typeURL {
	case resource.ListenerType:
		return "LDS"
	case resource.RouteType:
		return "RDS"
	case resource.ClusterType:
		return "CDS"
	case resource.EndpointType:
		return "EDS"
	}
	return typeURL
}

// ourSide is our generator's configuration of every pod of a scenario.
func ourSide(t *testing.T, w *meshObjects, sc sidecarScenario) map[string]*sidecarResources {
	t.Helper()
	snap := ourSnapshot(t, w.objects, sc.istio).WithExportDefaults(sc.defaultServiceExportTo, nil)
	out := map[string]*sidecarResources{}
	for _, key := range sc.pods {
		out[key] = ourConfig(t, snap, sc, w.pod(t, key))
	}
	return out
}
