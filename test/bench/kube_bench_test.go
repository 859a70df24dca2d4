package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// startKube runs istiod in Kubernetes mode against the test apiserver with
// its own namespace, and returns it with a client trusting its root.
func startKube(b *testing.B, env *testenv.Env) (*server, string, *x509.CertPool) {
	b.Helper()
	ns := env.Namespace(b)
	srv := start(b, istiodBinary(b), "--kubeconfig", env.Kubeconfig, "--namespace", ns,
		"--csr-rate-limit", "0", "--cacerts-dir", b.TempDir()+"/cacerts", "--inject-config-dir", b.TempDir()+"/inject")
	secret, err := env.Client(b).CoreV1().Secrets(ns).Get(context.Background(), "istio-ca-secret", metav1.GetOptions{})
	if err != nil {
		b.Fatalf("istio-ca-secret: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["root-cert.pem"]) {
		b.Fatal("istio-ca-secret has no root-cert.pem")
	}
	return srv, ns, roots
}

// BenchmarkCreateCertificateKubeJWT measures CSRs authenticated by
// service-account tokens reviewed by the real apiserver: cold, every request
// a new token (one TokenReview each); warm, each agent's token reviewed once
// and then cached.
func BenchmarkCreateCertificateKubeJWT(b *testing.B) {
	env := testenv.Get(b)
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			srv, ns, roots := startKube(b, env)
			conns := make([]pb.IstioCertificateServiceClient, clients)
			for i := range conns {
				conns[i] = dialTLS(b, srv.addr, "istiod."+ns+".svc", roots)
			}
			csrs := make([]string, clients)
			for i := range csrs {
				csrs[i] = newCSR(b)
			}
			perClient := make([]string, clients)
			for i := range perClient {
				perClient[i] = env.ServiceAccountToken(b, ns, "load", []string{"istio-ca"}, nil)
			}
			var perCall []string
			if mode == "cold" {
				perCall = tokens(b, env, ns, clients+b.N)
			}
			measure(b, srv, clients, func(i, j int) error {
				token := perClient[i]
				if perCall != nil {
					token = perCall[j]
				}
				ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
				_, err := conns[i].CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: csrs[i], ValidityDuration: 3600})
				return err
			})
		})
	}
}

// tokens requests n distinct service-account tokens, 8 at a time.
func tokens(b *testing.B, env *testenv.Env, ns string, n int) []string {
	out := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = env.ServiceAccountToken(b, ns, "load", []string{"istio-ca"}, nil)
		}()
	}
	wg.Wait()
	return out
}

func dialTLS(b *testing.B, addr, serverName string, roots *x509.CertPool) pb.IstioCertificateServiceClient {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12,
	})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// BenchmarkRootCertDistribution measures the time from creating a namespace
// to its istio-ca-root-cert ConfigMap existing, over b.N namespaces.
func BenchmarkRootCertDistribution(b *testing.B) {
	env := testenv.Get(b)
	client := env.Client(b)
	startKube(b, env)

	w, err := client.CoreV1().ConfigMaps("").Watch(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", "istio-ca-root-cert").String(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	seen := map[string]time.Time{}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			cm := ev.Object.(*corev1.ConfigMap)
			mu.Lock()
			if _, ok := seen[cm.Namespace]; !ok {
				seen[cm.Namespace] = time.Now()
			}
			mu.Unlock()
		}
	}()

	b.ResetTimer()
	lat := make([]time.Duration, b.N)
	for i := range b.N {
		name := fmt.Sprintf("bench-ns-%d-%d", time.Now().UnixNano(), i)
		t0 := time.Now()
		if _, err := client.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		lat[i] = waitSeen(b, &mu, seen, name, 10*time.Second).Sub(t0)
		deleteNamespace(client, name)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

func waitSeen(b *testing.B, mu *sync.Mutex, seen map[string]time.Time, ns string, limit time.Duration) time.Time {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		mu.Lock()
		at, ok := seen[ns]
		mu.Unlock()
		if ok {
			return at
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatalf("namespace %s got no istio-ca-root-cert within %v", ns, limit)
	return time.Time{}
}

func deleteNamespace(client kubernetes.Interface, name string) {
	_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
}
