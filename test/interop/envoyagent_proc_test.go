package interop

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// envoyAgent is one `pilot-agent proxy sidecar` in sidecar mode: Envoy
// enabled, with the stand-in of envoystandin as Envoy's binary. It runs in
// a working directory of its own that stands in for the container's root,
// as in proxyless mode.
type envoyAgent struct {
	*pilotAgent
	AdminPort int    // proxyAdminPort: the stand-in's admin listener
	StateFile string // where the stand-in writes what it holds
}

// istioBootstrapTemplate is Envoy's bootstrap template of the istio.io/istio
// this module requires (tools/packaging/common/envoy_bootstrap.json), which
// the proxy image holds at /var/lib/istio/envoy/envoy_bootstrap_tmpl.json.
var istioBootstrapTemplate = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m istio.io/istio: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "tools", "packaging", "common", "envoy_bootstrap.json"), nil
})

// startEnvoyAgent runs pilot-agent for w as the istio-proxy container of
// an injected pod would run it, against istiod at discoveryAddr trusting
// rootFile, with token as the pod's projected istio-token.
func startEnvoyAgent(t *testing.T, bins peers, w workload, token, rootFile, discoveryAddr string) *envoyAgent {
	t.Helper()
	return startEnvoyAgentMode(t, bins, w, token, rootFile, discoveryAddr, "sidecar",
		"ISTIO_META_POD_PORTS="+`[{"name":"http","containerPort":`+fmt.Sprint(envoyTargetPort)+`,"protocol":"TCP"}]`,
		"ISTIO_META_APP_CONTAINERS=app",
		"ISTIO_META_OWNER=kubernetes://apis/apps/v1/namespaces/"+w.Namespace+"/statefulsets/"+w.Labels["app"],
	)
}

// startEnvoyAgentMode runs `pilot-agent proxy <mode>` (sidecar or router)
// for w with the stand-in as Envoy, adding env to the environment every
// injected istio-proxy container has.
func startEnvoyAgentMode(t *testing.T, bins peers, w workload, token, rootFile, discoveryAddr, mode string, env ...string) *envoyAgent {
	t.Helper()
	// Short, not t.TempDir's test-named path: the xDS socket's absolute path
	// must fit a sockaddr_un. Removed after the agent stops (cleanups run
	// last in, first out).
	dir, err := os.MkdirTemp("", "envoyagent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ports := freeAddrs(t, 2)
	a := &envoyAgent{
		pilotAgent: &pilotAgent{Workload: w, Dir: dir, StatusPort: portOf(t, ports[0])},
		AdminPort:  portOf(t, ports[1]),
		// The stand-in writes it beside the bootstrap, in configPath.
		StateFile: filepath.Join(dir, "etc", "istio", "proxy", "standin-state.json"),
	}
	template, err := istioBootstrapTemplate()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(template)
	if err != nil {
		t.Fatalf("Istio's bootstrap template: %v", err)
	}
	// The pod's volumes: the projected token, the image's bootstrap
	// template, and the emptyDir the agent's SDS socket goes in.
	files := map[string][]byte{
		"var/run/secrets/tokens/istio-token":            []byte(token),
		"var/lib/istio/envoy/envoy_bootstrap_tmpl.json": tmpl,
		"var/run/secrets/workload-spiffe-uds/.keep":     nil,
		"etc/istio/proxy/.keep":                         nil,
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	proxyConfig, err := json.Marshal(map[string]any{
		"discoveryAddress": discoveryAddr,
		"configPath":       filepath.Join(dir, "etc", "istio", "proxy"),
		"binaryPath":       bins.envoy,
		"statusPort":       a.StatusPort,
		"proxyAdminPort":   a.AdminPort,
		// On SIGTERM the agent drains Envoy, waits this long, then kills it.
		"terminationDrainDuration": "1s",
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.pilotAgent, "proxy", mode, "--domain", w.Namespace+".svc.cluster.local")
	cmd.Dir = dir
	cmd.Env = append(agentEnv(t, w, discoveryAddr, rootFile, proxyConfig),
		"ISTIO_META_WORKLOAD_NAME="+w.Labels["app"],
		"ISTIO_META_MESH_ID="+trustDomain,
	)
	cmd.Env = append(cmd.Env, env...)
	a.proc = startProcess(t, "pilot-agent ("+mode+") "+w.Name, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stand-in of %s: %s", w.Name, a.summary())
		}
	})
	return a
}

// summary is the stand-in's protocol state without the resources, for a
// failed test's log.
func (a *envoyAgent) summary() string {
	st, err := a.readState()
	if err != nil {
		return err.Error()
	}
	secrets := map[string]string{}
	for name, s := range st.Secrets {
		secrets[name] = fmt.Sprintf("%s, %d ACKs, %d NACKs %s, verified by %q %s",
			s.Kind, s.ACKs, s.NACKs, s.LastNACK, s.VerifiedBy, s.VerifyError)
	}
	b, _ := json.MarshalIndent(map[string]any{
		"server": st.Server, "xds": st.XDS, "warming": st.Warming, "secrets": secrets,
		"warnings": st.Warnings, "admin": st.Admin, "stats": st.Stats,
	}, "", "  ")
	return string(b)
}

// standinState is the stand-in's state file (envoystandin's State), as
// far as the tests read it.
type standinState struct {
	Seq    int  `json:"seq"`
	PID    int  `json:"pid"`
	Exited bool `json:"exited"`
	Args   []string
	Node   struct {
		ID       string         `json:"id"`
		Metadata map[string]any `json:"metadata"`
	} `json:"node"`
	Bootstrap struct {
		ADSType string `json:"adsType"`
	} `json:"bootstrap"`
	Server struct {
		State          string `json:"state"`
		WorkersStarted bool   `json:"workersStarted"`
	} `json:"server"`
	ADSStreams int                               `json:"adsStreams"`
	XDS        map[string]*standinType           `json:"xds"`
	Resources  map[string]map[string]standinHeld `json:"resources"`
	Warming    map[string][]string               `json:"warming"`
	Secrets    map[string]*standinSecret         `json:"secrets"`
	Warnings   []string                          `json:"warnings"`
	Admin      map[string]int                    `json:"admin"`
	Stats      map[string]uint64                 `json:"stats"`
	Events     []standinEvent                    `json:"events"`
}

type standinType struct {
	Requested  bool     `json:"requested"`
	Wildcard   bool     `json:"wildcard"`
	Subscribed []string `json:"subscribed"`
	Responses  int      `json:"responses"`
	ACKs       int      `json:"acks"`
	NACKs      int      `json:"nacks"`
	LastNACK   string   `json:"lastNack"`
}

type standinHeld struct {
	Version  string          `json:"version"`
	Resource json.RawMessage `json:"resource"`
}

type standinSecret struct {
	Version          string `json:"version"`
	ACKs             int    `json:"acks"`
	NACKs            int    `json:"nacks"`
	LastNACK         string `json:"lastNack"`
	Kind             string `json:"kind"`
	CertificateChain string `json:"certificateChain"`
	KeyMatches       bool   `json:"keyMatches"`
	TrustedCA        string `json:"trustedCA"`
	VerifiedBy       string `json:"verifiedBy"`
	VerifyError      string `json:"verifyError"`
}

type standinEvent struct {
	Time        time.Time `json:"time"`
	Sent        bool      `json:"sent"`
	Stream      string    `json:"stream"`
	Type        string    `json:"type"`
	What        string    `json:"what"`
	Subscribe   []string  `json:"subscribe"`
	Unsubscribe []string  `json:"unsubscribe"`
	Resources   []string  `json:"resources"`
	Removed     []string  `json:"removed"`
	Detail      string    `json:"detail"`
}

func (e standinEvent) String() string {
	dir := "<-"
	if e.Sent {
		dir = "->"
	}
	s := fmt.Sprintf("%s %s %s %s", dir, e.Stream, e.Type, e.What)
	if len(e.Subscribe) > 0 {
		s += fmt.Sprintf(" +%v", e.Subscribe)
	}
	if len(e.Unsubscribe) > 0 {
		s += fmt.Sprintf(" -%v", e.Unsubscribe)
	}
	if e.What == "response" {
		s += fmt.Sprintf(" %d resources, %d removed", len(e.Resources), len(e.Removed))
	}
	if e.What == "nack" {
		s += ": " + e.Detail
	}
	return s
}

// readState reads the stand-in's state file; it does not exist until
// the stand-in started.
func (a *envoyAgent) readState() (*standinState, error) {
	b, err := os.ReadFile(a.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the stand-in has written no state yet: %w", err)
	}
	if err != nil {
		return nil, err
	}
	var st standinState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("decode %s: %w", a.StateFile, err)
	}
	return &st, nil
}

// state reads the stand-in's state, failing t if it cannot.
func (a *envoyAgent) state(t *testing.T) *standinState {
	t.Helper()
	st, err := a.readState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitState polls the stand-in's state until cond reports "" (met), and
// returns that state; it fails t with cond's last report otherwise.
func (a *envoyAgent) waitState(t *testing.T, timeout time.Duration, cond func(*standinState) string) *standinState {
	t.Helper()
	last := "no state read"
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := a.proc.running(); err != nil {
			t.Fatalf("pilot-agent %s: %v", a.Workload.Name, err)
		}
		st, err := a.readState()
		if err != nil {
			last = err.Error()
			continue
		}
		if last = cond(st); last == "" {
			return st
		}
	}
	t.Fatalf("stand-in of %s after %v: %s", a.Workload.Name, timeout, last)
	return nil
}
