package helm

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dryRunCases are the installs checked against the real apiserver: the
// render cases that do not depend on a namespace of their own.
var dryRunCases = []string{"default", "canary", "ha", "plugged-ca", "webhook-url"}

// Every object the chart renders is accepted by a real kube-apiserver: a
// server-side dry-run create (admission, defaulting, validation, strict
// field checks) of each, into a namespace of the test's own.
func TestRenderedObjectsPassServerSideDryRun(t *testing.T) {
	t.Parallel()
	c := getCluster(t)
	for _, name := range dryRunCases {
		t.Run(name, func(t *testing.T) {
			tc := renderCases[name]
			opts := tc.opts
			opts.Namespace = c.env.Namespace(t)
			began := time.Now()
			r := mustRender(t, opts)
			ctx := context.Background()
			for _, obj := range r.Objects {
				res, _, err := c.resourceFor(obj)
				if err != nil {
					t.Errorf("%s: %v", describe(obj), err)
					continue
				}
				_, err = res.Create(ctx, obj, metav1.CreateOptions{
					DryRun:          []string{metav1.DryRunAll},
					FieldValidation: "Strict",
				})
				if err != nil {
					t.Errorf("%s refused: %v", describe(obj), err)
				}
			}
			t.Logf("%d objects accepted by the apiserver in %v", len(r.Objects), time.Since(began).Round(time.Millisecond))
		})
	}
}
