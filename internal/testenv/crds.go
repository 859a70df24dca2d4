package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{
	Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
}

// InstallCRDs creates the CustomResourceDefinitions of the YAML files at
// paths (one or more documents each) and waits until the apiserver serves
// them. A definition that already exists is kept as it is, so tests of one
// package may install the same files concurrently.
func (e *Env) InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	client, err := dynamic.NewForConfig(rest.CopyConfig(e.Config))
	if err != nil {
		t.Fatalf("testenv: dynamic client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	var names []string
	for _, path := range paths {
		crds, err := readCRDs(path)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		for _, crd := range crds {
			_, err := client.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("testenv: create CRD %s from %s: %v", crd.GetName(), path, err)
			}
			names = append(names, crd.GetName())
		}
	}
	for _, name := range names {
		if err := waitEstablished(ctx, client, name); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
}

// readCRDs decodes the CustomResourceDefinitions of a YAML file.
func readCRDs(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CRDs: %w", err)
	}
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read CRDs %s: %w", path, err)
		}
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("decode CRDs %s: %w", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: %s %s is not a CustomResourceDefinition", path, u.GetKind(), u.GetName())
		}
		out = append(out, u)
	}
}

// waitEstablished waits until the CRD's Established condition is True.
func waitEstablished(ctx context.Context, client dynamic.Interface, name string) error {
	for {
		crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err == nil && established(crd) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("CRD %s not established: %w", name, err)
			}
			return fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
