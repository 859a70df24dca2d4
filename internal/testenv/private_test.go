package testenv_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

func TestPrivateEnvStopsAndRestartsWithItsData(t *testing.T) {
	t.Parallel()
	env := testenv.StartPrivate(t)
	ns := env.Namespace(t)
	client := env.Client(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	env.Stop(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server answered while stopped")
	}

	took := env.Restart(t)
	t.Logf("restarted in %v", took.Round(time.Millisecond))
	got, err := client.CoreV1().ConfigMaps(ns).Get(t.Context(), "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after restart, with the same client: %v", err)
	}
	if got.Data["k"] != "v" {
		t.Errorf("data after restart = %v", got.Data)
	}
	// The ServiceAccount signing key survives too: tokens still review.
	token := env.ServiceAccountToken(t, ns, "default", nil, nil)
	if token == "" {
		t.Error("no token after restart")
	}
}

func TestSharedEnvCannotBeStopped(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		env.Stop(ft)
	}()
	<-done
	if !ft.fataled {
		t.Fatal("Stop of the shared environment did not fail the test")
	}
	if _, err := env.Client(t).Discovery().ServerVersion(); err != nil {
		t.Fatalf("the shared environment stopped: %v", err)
	}
}

// fatalRecorder records a Fatal instead of failing the test.
type fatalRecorder struct {
	testing.TB
	fataled bool
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(string, ...any) {
	f.fataled = true
	runtime.Goexit()
}
func (f *fatalRecorder) Fatal(...any) {
	f.fataled = true
	runtime.Goexit()
}
