package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/migrate"
)

// caCommand is `istiod ca rotate|status|reset`: it starts a rotation of
// the self-signed root for the running replicas to carry out, shows where
// one stands and where the signing key is, or deletes the CA's keys to
// start over, in the state directory or, with --kubeconfig, in the
// Secrets istio-ca-secret and istio-ca-rotation.
func caCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "rotate" && args[0] != "status" && args[0] != "reset") {
		return usageError{errors.New("want `ca rotate`, `ca status` or `ca reset`")}
	}
	verb, args := args[0], args[1:]
	cfg := bootstrap.DefaultConfig()
	fs := flag.NewFlagSet("ca "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addCommonFlags(fs, &cfg, getenv)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubeconfig file of the cluster istiod runs in; empty means the local state directory (env KUBECONFIG)")
	fs.StringVar(&cfg.Namespace, "namespace", envOr(getenv, "POD_NAMESPACE", cfg.Namespace), "istiod's namespace (env POD_NAMESPACE)")
	var confirmed bool
	switch verb {
	case "rotate":
		fs.DurationVar(&cfg.RootTTL, "root-ttl", cfg.RootTTL, "lifetime of the new self-signed root")
		fs.StringVar(&cfg.CAKeyType, "ca-key-type", cfg.CAKeyType, "the new root's key: ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072 or rsa-4096")
	case "reset":
		fs.BoolVar(&confirmed, resetConfirmFlag, false, "confirm deleting the CA's keys: every workload certificate they signed stops being trusted")
	}
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if err := loadMeshConfig(&cfg, trustDomainSet(fs, getenv), stderr); err != nil {
		return err
	}
	log, err := newLogger("text", "warn", stderr)
	if err != nil {
		return err
	}
	if verb == "reset" {
		return caReset(ctx, cfg, confirmed, log, stdout)
	}
	authority, err := bootstrap.NewCA(cfg, log)
	if err != nil {
		return usageError{err}
	}
	var r *ca.Rotation
	if verb == "rotate" {
		r, err = authority.Rotator().Request(ctx)
		if errors.Is(err, ca.ErrRotationInProgress) {
			printRotation(stdout, r, replicasOf(ctx, authority, r, stderr), time.Now())
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "root rotation requested: the running istiod replicas carry it out")
		printRotation(stdout, r, replicas{}, time.Now()) // no replica has reported yet
	} else {
		if r, err = authority.Rotator().State(ctx); err != nil {
			return err
		}
		printRotation(stdout, r, replicasOf(ctx, authority, r, stderr), time.Now())
		if cfg.KubernetesMode() {
			printWithoutPCDS(ctx, stdout, stderr, cfg.Kubeconfig)
		}
	}
	key, err := authority.SigningKey(ctx)
	if err != nil {
		return err
	}
	printSigningKey(stdout, cfg.KubernetesMode(), key)
	return nil
}

// replicas are the replicas that run, as a rotation step counts them;
// known is false where that cannot be told (local mode).
type replicas struct {
	running []string
	known   bool
}

// replicasOf asks which replicas run while r prepares; a failure to tell is
// written to stderr, and the status is printed without it.
func replicasOf(ctx context.Context, authority *ca.CA, r *ca.Rotation, stderr io.Writer) replicas {
	running, known, err := authority.Rotator().RunningReplicas(ctx, r)
	if err != nil {
		fmt.Fprintf(stderr, "cannot tell which replicas run: %v\n", err)
	}
	return replicas{running: running, known: known}
}

// printRotation writes where rotation r stands, for an operator.
func printRotation(w io.Writer, r *ca.Rotation, reps replicas, now time.Time) {
	if !r.InProgress() {
		fmt.Fprintln(w, "phase: idle (no root rotation under way)")
		return
	}
	fmt.Fprintf(w, "phase: %s\n", r.Phase)
	fmt.Fprintf(w, "old root: %s\n", describeRoot(r.OldRoot))
	fmt.Fprintf(w, "new root: %s\n", describeRoot(r.NewRoot))
	fmt.Fprintf(w, "prepared: %s\n", r.Prepared.UTC().Format(time.RFC3339))
	switch r.Phase {
	case ca.PhasePrepare:
		fmt.Fprintln(w, "the old key signs until every proxy and namespace holds the new root")
		for _, id := range slices.Sorted(maps.Keys(r.Replicas)) {
			rep := r.Replicas[id]
			state := ""
			if reps.known {
				state = ", no live Lease or pod"
				if slices.Contains(reps.running, id) {
					state = ", running"
				}
			}
			fmt.Fprintf(w, "replica %s (reported %s ago%s): %d proxies without the new root %v, %d namespaces %v\n",
				id, now.Sub(rep.At).Round(time.Second), state, len(rep.Unacked), rep.Unacked, len(rep.Missing), rep.Missing)
		}
		for _, id := range reps.running {
			if _, ok := r.Replicas[id]; !ok {
				fmt.Fprintf(w, "replica %s (running, never reported): holds the rotation until it can update the rotation state\n", id)
			}
		}
	case ca.PhaseActivate:
		fmt.Fprintf(w, "activated: %s; the new key signs\n", r.Activated.UTC().Format(time.RFC3339))
		fmt.Fprintf(w, "the old root leaves the bundle at %s, when the last certificate the old key signed expires\n", r.OldSignedUntil.UTC().Format(time.RFC3339))
		if len(r.Forced) > 0 {
			fmt.Fprintf(w, "activated past the timeout without: %v\n", r.Forced)
		}
	}
}

func describeRoot(der []byte) string {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return "unreadable"
	}
	sum := sha256.Sum256(der)
	return fmt.Sprintf("%s, sha256 %s, expires %s", c.Subject, hex.EncodeToString(sum[:8]), c.NotAfter.UTC().Format(time.RFC3339))
}

// printSigningKey writes where the key that signs is kept.
func printSigningKey(w io.Writer, kube bool, k *ca.SigningKey) {
	if k.Cert == nil {
		fmt.Fprintln(w, "signing key: none yet; the first istiod to start makes a self-signed root")
		return
	}
	fmt.Fprintf(w, "signing key: %s\n", k.Where)
	fmt.Fprintf(w, "signing key id: sha256 %s (subject key id %s)\n", k.KeyID(), hex.EncodeToString(k.Cert.SubjectKeyId))
	fmt.Fprintf(w, "signing root: %s\n", describeRoot(k.Root.Raw))
	// From outside the cluster the cacerts Secret istiod may mount is
	// not in sight.
	if _, err := os.Stat(k.PluggedInDir); kube && err != nil {
		fmt.Fprintf(w, "plugged-in CA: %s is not here to read; if istiod mounts a cacerts Secret there, that set signs instead\n", k.PluggedInDir)
	}
}

// printWithoutPCDS names the running pods whose proxy does not take the
// trust bundle over xDS, which a root rotation reaches only when they
// restart (Istio's injected pods among them); a failure to list them is
// written to stderr.
func printWithoutPCDS(ctx context.Context, stdout, stderr io.Writer, kubeconfig string) {
	rc, err := restConfig(kubeconfig)
	var client kubernetes.Interface
	if err == nil {
		client, err = kubernetes.NewForConfig(rc)
	}
	var pods []migrate.Proxy
	if err == nil {
		pods, err = migrate.ListProxies(ctx, client)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cannot list the pods without PCDS: %v\n", err)
		return
	}
	fmt.Fprintf(stdout, "pods whose proxy does not take the trust bundle over xDS (a root rotation reaches them only when they restart): %d\n", len(pods))
	for i, p := range pods {
		if i == maxPodsListed {
			fmt.Fprintf(stdout, "  … and %d more\n", len(pods)-maxPodsListed)
			break
		}
		fmt.Fprintf(stdout, "  %s\n", p)
	}
}

// maxPodsListed bounds the pods ca status names one by one.
const maxPodsListed = 50
