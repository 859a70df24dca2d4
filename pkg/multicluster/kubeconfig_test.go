package multicluster

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// kubeconfig renders a kubeconfig with the given cluster and user fields
// (YAML fragments, indented by the caller's choice of keys).
func kubeconfig(server string, clusterExtra, userExtra map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: %s\n", server)
	for k, v := range clusterExtra {
		fmt.Fprintf(&b, "    %s: %s\n", k, v)
	}
	b.WriteString("users:\n- name: u\n  user:\n")
	if len(userExtra) == 0 {
		b.WriteString("    token: t0ken\n")
	}
	for k, v := range userExtra {
		fmt.Fprintf(&b, "    %s: %s\n", k, v)
	}
	b.WriteString("contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n")
	return b.String()
}

func TestRESTConfigRefusesWhatRunsCodeOrReadsFiles(t *testing.T) {
	const server = "https://127.0.0.1:6443"
	cases := map[string]struct {
		config string
		want   error
	}{
		"an exec plugin is refused": {kubeconfig(server, nil, map[string]string{
			"exec": "{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, id]}"}), ErrUnsafeKubeconfig},
		"the gcp auth provider is refused": {kubeconfig(server, nil, map[string]string{
			"auth-provider": "{name: gcp, config: {cmd-path: /bin/sh}}"}), ErrUnsafeKubeconfig},
		"the oidc auth provider is refused, its refresh reads a CA path": {kubeconfig(server, nil, map[string]string{
			"auth-provider": "{name: oidc, config: {idp-certificate-authority: /etc/shadow}}"}), ErrUnsafeKubeconfig},
		"a token file is refused":              {kubeconfig(server, nil, map[string]string{"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}), ErrUnsafeKubeconfig},
		"a client key path is refused":         {kubeconfig(server, nil, map[string]string{"client-key": "/etc/cacerts/ca-key.pem"}), ErrUnsafeKubeconfig},
		"a client certificate path is refused": {kubeconfig(server, nil, map[string]string{"client-certificate": "/etc/cacerts/ca-cert.pem"}), ErrUnsafeKubeconfig},
		"a CA path is refused":                 {kubeconfig(server, map[string]string{"certificate-authority": "/etc/cacerts/ca-key.pem"}, nil), ErrUnsafeKubeconfig},
		"skipping TLS verification is refused": {kubeconfig(server, map[string]string{"insecure-skip-tls-verify": "true"}, nil), ErrUnsafeKubeconfig},
		"a proxy URL is refused":               {kubeconfig(server, map[string]string{"proxy-url": "http://127.0.0.1:3128"}, nil), ErrUnsafeKubeconfig},
		"impersonation is refused":             {kubeconfig(server, nil, map[string]string{"token": "x", "as": "system:admin"}), ErrUnsafeKubeconfig},
		"plain http is refused":                {kubeconfig("http://127.0.0.1:6443", nil, nil), ErrInvalidKubeconfig},
		"an empty kubeconfig is refused":       {"", ErrInvalidKubeconfig},
		"garbage is refused":                   {"\x00\xff{{{", ErrInvalidKubeconfig},
		"a missing current context is refused": {strings.Replace(kubeconfig(server, nil, nil), "current-context: c", "current-context: other", 1), ErrInvalidKubeconfig},
		"an oversized kubeconfig is refused":   {kubeconfig(server, nil, map[string]string{"token": strings.Repeat("a", MaxKubeconfigSize)}), ErrInvalidKubeconfig},
		"a dangerous user outside the current context is refused too": {strings.Replace(kubeconfig(server, nil, nil),
			"users:\n", "users:\n- name: other\n  user:\n    tokenFile: /etc/passwd\n", 1), ErrUnsafeKubeconfig},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rc, err := RESTConfig([]byte(tc.config))
			if !errors.Is(err, tc.want) {
				t.Fatalf("RESTConfig = %v, %v; want %v", rc, err, tc.want)
			}
		})
	}
}

func TestRESTConfigKeepsInlineCredentials(t *testing.T) {
	ca := base64.StdEncoding.EncodeToString([]byte("ca-pem"))
	rc, err := RESTConfig([]byte(kubeconfig("https://remote.example:6443",
		map[string]string{"certificate-authority-data": ca, "tls-server-name": "kubernetes"},
		map[string]string{"token": "reader-token"})))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://remote.example:6443" || rc.BearerToken != "reader-token" || string(rc.CAData) != "ca-pem" ||
		rc.ServerName != "kubernetes" || rc.Timeout != remoteRequestTimeout {
		t.Fatalf("config = %+v", rc)
	}
	if rc.ExecProvider != nil || rc.AuthProvider != nil || rc.BearerTokenFile != "" || rc.CAFile != "" || rc.KeyFile != "" || rc.CertFile != "" {
		t.Fatalf("config carries a file or plugin: %+v", rc)
	}
}
