package testenv_test

import (
	"context"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

func TestInstallCRDsIsIdempotent(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	crds, err := filepath.Glob("../../charts/istiod/crds/*.yaml")
	if err != nil || len(crds) == 0 {
		t.Fatalf("CRDs of the chart: %v %v", crds, err)
	}
	t.Run("concurrently", func(t *testing.T) {
		for _, name := range []string{"first", "second"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				env.InstallCRDs(t, crds...)
			})
		}
	})
	env.InstallCRDs(t, crds...) // and again
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	pa := schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
	if _, err := client.Resource(pa).Namespace(env.Namespace(t)).List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("list PeerAuthentications after install: %v", err)
	}
}
