package kubesource

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	networkinglisters "istio.io/client-go/pkg/listers/networking/v1"
	securitylisters "istio.io/client-go/pkg/listers/security/v1"
	telemetrylisters "istio.io/client-go/pkg/listers/telemetry/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
)

// istioKind is an Istio resource the source reads once the apiserver
// serves it, that is once its CRD is installed.
type istioKind struct {
	resource     string // "peerauthentications"
	groupVersion string // "security.istio.io/v1"
	kind         string // "PeerAuthentication"
	// informer returns the kind's informer of the factory, creating it.
	informer func(istioinformers.SharedInformerFactory) cache.SharedIndexInformer
	// setLister points the kind's lister at idx.
	setLister func(l *listers, idx cache.Indexer)
}

// crd names the kind's CustomResourceDefinition.
func (k istioKind) crd() string {
	group, _, _ := strings.Cut(k.groupVersion, "/")
	return k.resource + "." + group
}

// istioKinds are the Istio resources the source reads.
func istioKinds() []istioKind {
	return []istioKind{{
		resource: "peerauthentications", groupVersion: "security.istio.io/v1", kind: "PeerAuthentication",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Security().V1().PeerAuthentications().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) { l.peerAuthn = securitylisters.NewPeerAuthenticationLister(idx) },
	}, {
		resource: "authorizationpolicies", groupVersion: "security.istio.io/v1", kind: "AuthorizationPolicy",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Security().V1().AuthorizationPolicies().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) { l.authz = securitylisters.NewAuthorizationPolicyLister(idx) },
	}, {
		resource: "requestauthentications", groupVersion: "security.istio.io/v1", kind: "RequestAuthentication",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Security().V1().RequestAuthentications().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) {
			l.requestAuthn = securitylisters.NewRequestAuthenticationLister(idx)
		},
	}, {
		resource: "destinationrules", groupVersion: "networking.istio.io/v1", kind: "DestinationRule",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().DestinationRules().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) { l.destRules = networkinglisters.NewDestinationRuleLister(idx) },
	}, {
		resource: "gateways", groupVersion: "networking.istio.io/v1", kind: "Gateway",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().Gateways().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) { l.gateways = networkinglisters.NewGatewayLister(idx) },
	}, {
		resource: "virtualservices", groupVersion: "networking.istio.io/v1", kind: "VirtualService",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().VirtualServices().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) {
			l.virtualServices = networkinglisters.NewVirtualServiceLister(idx)
		},
	}, {
		resource: "serviceentries", groupVersion: "networking.istio.io/v1", kind: "ServiceEntry",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().ServiceEntries().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) {
			l.serviceEntries = networkinglisters.NewServiceEntryLister(idx)
		},
	}, {
		resource: "telemetries", groupVersion: "telemetry.istio.io/v1", kind: "Telemetry",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Telemetry().V1().Telemetries().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) { l.telemetries = telemetrylisters.NewTelemetryLister(idx) },
	}, {
		resource: "sidecars", groupVersion: "networking.istio.io/v1", kind: "Sidecar",
		informer: func(f istioinformers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Networking().V1().Sidecars().Informer()
		},
		setLister: func(l *listers, idx cache.Indexer) { l.sidecars = networkinglisters.NewSidecarLister(idx) },
	}}
}

// emptyIndexer is the cache of a kind that is not served: it stays empty.
func emptyIndexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// served asks the apiserver's discovery which of kinds it serves, by
// resource name. A group version the apiserver does not know serves none;
// any other failure is an error, never read as absence.
func served(d discovery.ServerResourcesInterface, kinds []istioKind) (map[string]bool, error) {
	byGV := map[string][]istioKind{}
	for _, k := range kinds {
		byGV[k.groupVersion] = append(byGV[k.groupVersion], k)
	}
	out := map[string]bool{}
	for _, gv := range slices.Sorted(maps.Keys(byGV)) {
		list, err := d.ServerResourcesForGroupVersion(gv)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("group version %s: %w", gv, err)
		case list == nil:
			return nil, fmt.Errorf("group version %s: no resource list", gv)
		}
		for _, k := range byGV[gv] {
			out[k.resource] = slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == k.resource })
		}
	}
	return out, nil
}

// errDiscovery marks a failure of the apiserver's discovery, which Run
// retries.
var errDiscovery = errors.New("discover Istio CRDs")

// discover creates and starts the informers of the missing kinds the
// apiserver now serves; they stay staged, unread by build, until promote.
// The first successful discovery logs each kind still missing, once. When
// discovery fails it changes nothing and its error wraps errDiscovery.
func (i *informers) discover(d discovery.ServerResourcesInterface, stop <-chan struct{}) error {
	if len(i.missing) == 0 {
		return nil
	}
	// Discovery takes no context, and an apiserver cut off mid-request
	// holds it until the client gives up: stop does not wait for it.
	type answer struct {
		ok  map[string]bool
		err error
	}
	answered := make(chan answer, 1)
	missing := slices.Clone(i.missing)
	go func() {
		ok, err := served(d, missing)
		answered <- answer{ok, err}
	}()
	var a answer
	select {
	case a = <-answered:
	case <-stop:
		return nil // nothing changed; the caller is stopping
	}
	ok, err := a.ok, a.err
	if err != nil {
		return fmt.Errorf("%w: %w", errDiscovery, err)
	}
	var still []istioKind
	for _, k := range i.missing {
		if !ok[k.resource] {
			if !i.discovered {
				i.log.Warn("Istio CRD "+k.crd()+" not installed; no "+k.kind+" policies apply until it is",
					"crd", k.crd())
			}
			still = append(still, k)
			continue
		}
		inf := k.informer(i.istio)
		if err := i.watch(k.resource, inf); err != nil {
			return err
		}
		i.staged[k.resource] = staged{kind: k, informer: inf}
		i.log.Info("Istio CRD "+k.crd()+" served; watching it", "crd", k.crd())
	}
	i.missing, i.discovered = still, true
	i.istio.Start(stop) // starts only the informers not yet started
	return nil
}

// staged is the informer of a kind that is served but whose cache build
// does not read yet.
type staged struct {
	kind     istioKind
	informer cache.SharedIndexInformer
}

// promote makes build read the caches of the staged informers that have
// synced, so a policy cache is read only once complete. It reports whether
// it promoted any.
func (i *informers) promote() bool {
	promoted := false
	for name, s := range i.staged {
		if !s.informer.HasSynced() {
			continue
		}
		s.kind.setLister(&i.listers, s.informer.GetIndexer())
		i.named[name] = s.informer
		delete(i.staged, name)
		promoted = true
	}
	return promoted
}
