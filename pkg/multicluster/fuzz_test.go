package multicluster

import (
	"errors"
	"testing"
)

// FuzzRESTConfig: whatever a remote secret holds, RESTConfig either
// refuses it with one of its errors or returns a configuration that runs
// nothing, reads no file and verifies TLS.
func FuzzRESTConfig(f *testing.F) {
	f.Add([]byte(kubeconfig("https://127.0.0.1:6443", nil, nil)))
	f.Add([]byte(kubeconfig("https://127.0.0.1:6443", nil, map[string]string{"tokenFile": "/etc/passwd"})))
	f.Add([]byte(kubeconfig("https://127.0.0.1:6443", map[string]string{"insecure-skip-tls-verify": "true"}, nil)))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Config","current-context":"c","contexts":[{"name":"c","context":{"cluster":"x","user":"y"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, err := RESTConfig(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidKubeconfig) && !errors.Is(err, ErrUnsafeKubeconfig) {
				t.Fatalf("error of unknown kind: %v", err)
			}
			return
		}
		if rc.ExecProvider != nil || rc.AuthProvider != nil || rc.BearerTokenFile != "" || rc.CAFile != "" ||
			rc.CertFile != "" || rc.KeyFile != "" || rc.Insecure || rc.Proxy != nil || rc.Impersonate.UserName != "" {
			t.Fatalf("unsafe configuration accepted: %+v", rc)
		}
	})
}
