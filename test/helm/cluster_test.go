package helm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// cluster is the admin's view of the test apiserver: dynamic client and a
// REST mapper that learns custom kinds once their CRDs are established.
type cluster struct {
	env     *testenv.Env
	dyn     dynamic.Interface
	disco   discovery.DiscoveryInterface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	crdOnce sync.Once
	crdErr  error
}

var (
	sharedClusterOnce sync.Once
	sharedCluster     *cluster
	sharedClusterErr  error
)

// getCluster returns the package's cluster with the chart's CRDs (and a
// stand-in for the Prometheus Operator's ServiceMonitor CRD) installed.
func getCluster(t *testing.T) *cluster {
	t.Helper()
	env := testenv.Get(t)
	sharedClusterOnce.Do(func() {
		cfg := rest.CopyConfig(env.Config)
		c := &cluster{env: env}
		if c.dyn, sharedClusterErr = dynamic.NewForConfig(cfg); sharedClusterErr != nil {
			return
		}
		if c.disco, sharedClusterErr = discovery.NewDiscoveryClientForConfig(cfg); sharedClusterErr != nil {
			return
		}
		c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.disco))
		sharedCluster = c
	})
	if sharedClusterErr != nil {
		t.Fatalf("clients: %v", sharedClusterErr)
	}
	c := sharedCluster
	c.crdOnce.Do(func() { c.crdErr = c.installCRDs() })
	if c.crdErr != nil {
		t.Fatalf("install CRDs: %v", c.crdErr)
	}
	return c
}

// serviceMonitorCRD stands in for the Prometheus Operator's CRD: enough
// for the apiserver to serve monitoring.coreos.com/v1 ServiceMonitor.
func serviceMonitorCRD() *unstructured.Unstructured {
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: &preserve},
					},
				}},
			}},
		},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		panic(err) // a typed object always converts
	}
	return &unstructured.Unstructured{Object: m}
}

// installCRDs creates the chart's CRDs (for real: dry-run objects of their
// kinds must resolve) and waits until they are established and discovered.
func (c *cluster) installCRDs() error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	crds = append(crds, serviceMonitorCRD())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	for _, crd := range crds {
		_, err := c.dyn.Resource(res).Create(ctx, crd, metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", crd.GetName(), err)
		}
	}
	ext, err := apiextensionsclient.NewForConfig(rest.CopyConfig(c.env.Config))
	if err != nil {
		return err
	}
	for _, u := range crds {
		for {
			crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, u.GetName(), metav1.GetOptions{})
			if err == nil && established(crd) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not established: %w", u.GetName(), ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// Discovery lags a little behind Established.
	for _, u := range crds {
		gvk := crdKind(u)
		for {
			c.mapper.Reset()
			if _, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not discovered: %w", gvk, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// crdKind is the kind and storage version a CRD serves.
func crdKind(u *unstructured.Unstructured) schema.GroupVersionKind {
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	version := ""
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if stored, _ := m["storage"].(bool); stored {
			version, _ = m["name"].(string)
		}
	}
	return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

// resourceFor maps an object to its resource, for the dynamic client.
func (c *cluster) resourceFor(u *unstructured.Unstructured) (dynamic.ResourceInterface, *meta.RESTMapping, error) {
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.mapper.Reset()
		if m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, nil, fmt.Errorf("map %s: %w", gvk, err)
		}
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(u.GetNamespace()), m, nil
	}
	return c.dyn.Resource(m.Resource), m, nil
}

// describe names an object as Kind namespace/name.
func describe(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return u.GetKind() + " " + ns + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}

// waitUntil polls cond every 50ms until it holds or timeout passes.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last: %s)", timeout, what, strings.TrimSpace(detail))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
