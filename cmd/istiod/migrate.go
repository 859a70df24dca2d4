package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bulwark-mesh/bulwark/pkg/migrate"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
)

// migrateCommand is `istiod migrate check`: the preflight of a move from
// Istio's istiod to Bulwark installed as a revision beside it. It exits 1
// when something blocks the move.
func migrateCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		return usageError{errors.New("want `migrate check`")}
	}
	fs := flag.NewFlagSet("migrate check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := migrate.Config{}
	var kubeconfig string
	timeout := 2 * time.Minute
	fs.StringVar(&kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubeconfig file of the cluster to check; empty means in the cluster (env KUBECONFIG)")
	fs.StringVar(&cfg.Namespace, "namespace", envOr(getenv, "POD_NAMESPACE", "istio-system"), "namespace Bulwark is or will be installed in: Istio's istiod's (env POD_NAMESPACE)")
	fs.StringVar(&cfg.Revision, "revision", "bulwark", "Bulwark's revision (the chart's revision value)")
	fs.StringVar(&cfg.TrustDomain, "trust-domain", envOr(getenv, "TRUST_DOMAIN", "cluster.local"), "Bulwark's trust domain (env TRUST_DOMAIN)")
	fs.BoolVar(&cfg.AllowUnsupported, "allow-unsupported", false, "report the Istio objects Bulwark does not honour in full without blocking the move")
	fs.DurationVar(&timeout, "timeout", timeout, "how long to wait for the cluster's answers")
	if err := fs.Parse(args[1:]); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	log, err := newLogger("text", "warn", stderr)
	if err != nil {
		return err
	}
	// The report lists each object; the reporter's line per object would
	// say it twice. Its other lines (a list refused, say) stay.
	cfg.Logger = slog.New(dropMessage{log.Handler(), unsupported.Message})
	rc, err := restConfig(kubeconfig)
	if err != nil {
		return usageError{err}
	}
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if cfg.Dynamic, err = dynamic.NewForConfig(rc); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if cfg.Metadata, err = metadata.NewForConfig(rc); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	report, err := migrate.Check(ctx, cfg)
	if err != nil {
		return err
	}
	report.WriteText(stdout)
	return report.Err()
}

// restConfig is the kubeconfig file's cluster and credentials, or else
// the pod's service account.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.UserAgent = "istiod-migrate-check"
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}

// dropMessage is a slog.Handler that leaves out the records of one message.
type dropMessage struct {
	slog.Handler
	msg string
}

func (d dropMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == d.msg {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d dropMessage) WithAttrs(attrs []slog.Attr) slog.Handler {
	return dropMessage{d.Handler.WithAttrs(attrs), d.msg}
}

func (d dropMessage) WithGroup(name string) slog.Handler {
	return dropMessage{d.Handler.WithGroup(name), d.msg}
}
