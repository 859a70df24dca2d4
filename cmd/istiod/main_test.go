package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

func noEnv(string) string { return "" }

func TestCommandLine(t *testing.T) {
	tests := map[string]struct {
		args []string
		code int
		out  string
	}{
		"version prints the version":                {args: []string{"version"}, code: exitOK, out: version},
		"an unknown command is a usage error":       {args: []string{"serve"}, code: exitUsage, out: "unknown command"},
		"an unknown flag is a usage error":          {args: []string{"--no-such-flag"}, code: exitUsage, out: "no-such-flag"},
		"a bad log format is a usage error":         {args: []string{"discovery", "--log-format", "xml"}, code: exitUsage, out: "log-format"},
		"a bad trust domain is a usage error":       {args: []string{"--trust-domain", "A B"}, code: exitUsage, out: "trust domain"},
		"mint-cert needs a service account":         {args: []string{"mint-cert", "--out-dir", "x"}, code: exitUsage, out: "required"},
		"mint-cert refuses a bad identity":          {args: []string{"mint-cert", "--service-account", "a/b", "--out-dir", "x"}, code: exitUsage, out: "identity"},
		"stray arguments are a usage error":         {args: []string{"discovery", "extra"}, code: exitUsage, out: "unexpected"},
		"a malformed allowed CIDR is a usage error": {args: []string{"discovery", "--jwt-fetch-allowed-cidrs", "169.254.169.254"}, code: exitUsage, out: "jwt-fetch-allowed-cidrs"},
		"help is not an error":                      {args: []string{"discovery", "-h"}, code: exitOK, out: "secureGRPCAddr"},
		"mint-cert help names its own options":      {args: []string{"mint-cert", "-h"}, code: exitOK, out: "service-account"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, noEnv, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if out := stdout.String() + stderr.String(); !strings.Contains(out, tc.out) {
				t.Errorf("output lacks %q:\n%s", tc.out, out)
			}
		})
	}
}

func TestMintCertWritesAgentFiles(t *testing.T) {
	state, out := t.TempDir(), t.TempDir()+"/creds"
	var stdout, stderr bytes.Buffer
	code := run([]string{"mint-cert", "--state-dir", state, "--namespace", "team", "--service-account", "api", "--out-dir", out}, noEnv, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "spiffe://cluster.local/ns/team/sa/api") {
		t.Errorf("output does not name the identity: %s", stdout.String())
	}
	for _, f := range []string{"cert-chain.pem", "key.pem", "root-cert.pem"} {
		if _, err := os.ReadFile(out + "/" + f); err != nil {
			t.Error(err)
		}
	}
}

func TestMeshConfigFileSetsTheTrustDomain(t *testing.T) {
	tests := map[string]struct {
		mesh string
		args []string
		env  map[string]string
		code int
		out  string
	}{
		"the mesh config's trust domain is the CA's": {
			mesh: "trustDomain: example.org\n", code: exitOK, out: "spiffe://example.org/ns/team/sa/api",
		},
		"without one, the flag's": {
			mesh: "enableAutoMtls: true\n", args: []string{"--trust-domain", "flag.example"}, code: exitOK, out: "spiffe://flag.example/ns/team/sa/api",
		},
		"the same trust domain in both is fine": {
			mesh: "trustDomain: example.org\n", args: []string{"--trust-domain", "example.org"}, code: exitOK, out: "spiffe://example.org/",
		},
		"a flag that disagrees is a usage error": {
			mesh: "trustDomain: example.org\n", args: []string{"--trust-domain", "other.org"}, code: exitUsage, out: "differ",
		},
		"TRUST_DOMAIN that disagrees is a usage error": {
			mesh: "trustDomain: example.org\n", env: map[string]string{"TRUST_DOMAIN": "other.org"}, code: exitUsage, out: "differ",
		},
		"an invalid mesh config stops the command": {
			mesh: "trustDomain: Not Valid\n", code: exitError, out: "mesh config",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			if err := os.WriteFile(filepath.Join(state, "mesh.yaml"), []byte(tc.mesh), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"mint-cert", "--state-dir", state, "--namespace", "team", "--service-account", "api", "--out-dir", t.TempDir() + "/creds"}, tc.args...)
			var stdout, stderr bytes.Buffer
			code := run(args, func(k string) string { return tc.env[k] }, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if out := stdout.String() + stderr.String(); !strings.Contains(out, tc.out) {
				t.Errorf("output lacks %q:\n%s", tc.out, out)
			}
		})
	}
}

func TestDiscoveryNamesTheMeshConfigFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run([]string{"discovery", "-h"}, noEnv, &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-meshConfig") || !strings.Contains(stderr.String(), "/etc/istio/config/mesh") {
		t.Errorf("discovery's help does not document --meshConfig and its Kubernetes default:\n%s", stderr.String())
	}
}

// `istiod ca rotate` starts a rotation in the state directory once, says
// where it stands, and refuses a second one while it is under way;
// `istiod ca status` reports it; mint-cert keeps signing with the old key
// while the rotation prepares, with both roots in the bundle it writes.
func TestCARotateCommand(t *testing.T) {
	state := t.TempDir()
	ca := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"ca"}, append(args, "--state-dir", state)...), noEnv, &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	if code, out := ca("status"); code != exitOK || !strings.Contains(out, "phase: idle") {
		t.Fatalf("status before any rotation: exit %d\n%s", code, out)
	}
	// The first root comes from the first CA use, as in discovery.
	creds := t.TempDir() + "/creds"
	if code := run([]string{"mint-cert", "--state-dir", state, "--service-account", "a", "--out-dir", creds}, noEnv, new(bytes.Buffer), new(bytes.Buffer)); code != exitOK {
		t.Fatal("mint-cert failed")
	}
	if code, out := ca("rotate"); code != exitOK || !strings.Contains(out, "phase: prepare") || !strings.Contains(out, "new root:") {
		t.Fatalf("rotate: exit %d\n%s", code, out)
	}
	if code, out := ca("rotate"); code != exitError || !strings.Contains(out, "already under way") || !strings.Contains(out, "phase: prepare") {
		t.Fatalf("a second rotate: exit %d\n%s", code, out)
	}
	if code, out := ca("status"); code != exitOK || !strings.Contains(out, "phase: prepare") {
		t.Fatalf("status during the rotation: exit %d\n%s", code, out)
	}
	if code := run([]string{"mint-cert", "--state-dir", state, "--service-account", "a", "--out-dir", creds + "2"}, noEnv, new(bytes.Buffer), new(bytes.Buffer)); code != exitOK {
		t.Fatal("mint-cert during the rotation failed")
	}
	roots, err := os.ReadFile(filepath.Join(creds+"2", "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(roots), "BEGIN CERTIFICATE"); n != 2 {
		t.Errorf("mint-cert during prepare wrote %d roots, want the old and the new", n)
	}
	if code, out := ca("rotate", "--cacerts-dir", t.TempDir()); code != exitError || !strings.Contains(out, "already under way") {
		t.Fatalf("rotate with an empty cacerts dir: exit %d\n%s", code, out)
	}
}

// `istiod ca status` says which reporting replicas run, and names those
// that run without a report, where it can tell (Kubernetes mode).
func TestCAStatusNamesTheReplicasThatRun(t *testing.T) {
	now := time.Now()
	r := &ca.Rotation{Phase: ca.PhasePrepare, Prepared: now, Replicas: map[string]ca.ReplicaReport{
		"istiod-a": {At: now},
		"istiod-b": {At: now.Add(-time.Minute), Unacked: []string{"app-1.ns"}},
		"istiod-c": {At: now.Add(-time.Hour)},
	}}
	for name, tc := range map[string]struct {
		reps      replicas
		want, not []string
	}{
		"local mode": {
			want: []string{"replica istiod-b (reported 1m0s ago): 1 proxies"},
			not:  []string{"running", "never reported"},
		},
		"kubernetes mode": {
			reps: replicas{running: []string{"istiod-a", "istiod-b", "istiod-d"}, known: true},
			want: []string{
				"replica istiod-b (reported 1m0s ago, running): 1 proxies",
				"replica istiod-c (reported 1h0m0s ago, no live Lease or pod)",
				"replica istiod-d (running, never reported)",
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			printRotation(&out, r, tc.reps, now)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("no %q in\n%s", w, out.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out.String(), w) {
					t.Errorf("%q in\n%s", w, out.String())
				}
			}
		})
	}
}

func TestScopeGatewayToNamespaceReadsIstiosVariable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run([]string{"discovery", "-h"}, noEnv, &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-scope-gateway-to-namespace") || !strings.Contains(stderr.String(), "PILOT_SCOPE_GATEWAY_TO_NAMESPACE") {
		t.Errorf("discovery's help does not document --scope-gateway-to-namespace and its variable:\n%s", stderr.String())
	}
	env := func(k string) string {
		if k == "PILOT_SCOPE_GATEWAY_TO_NAMESPACE" {
			return "maybe"
		}
		return ""
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"discovery"}, env, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "PILOT_SCOPE_GATEWAY_TO_NAMESPACE") {
		t.Errorf("a malformed PILOT_SCOPE_GATEWAY_TO_NAMESPACE: exit %d, stderr:\n%s", code, stderr.String())
	}
}

func TestBadMeshNetworksStopDiscovery(t *testing.T) {
	state := t.TempDir()
	path := filepath.Join(state, "networks.yaml")
	if err := os.WriteFile(path, []byte("networks: {n: {gateways: [{address: \"not an address!\", port: 15443}]}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"discovery", "--state-dir", state, "--networksConfig", path}, noEnv, &stdout, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "mesh networks") || !strings.Contains(stderr.String(), "neither an IP address nor a DNS name") {
		t.Fatalf("exit code %d, stderr:\n%s", code, stderr.String())
	}
}
