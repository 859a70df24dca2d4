// Command envoystandin stands in for the Envoy binary under an unmodified
// pilot-agent (ProxyConfig.binaryPath), where no Envoy can be installed.
//
// It takes the command line pilot-agent gives Envoy (pkg/envoy/proxy.go in
// istio.io/istio), reads the bootstrap named by -c, and speaks to the agent
// as Envoy does: Delta ADS over the xds-grpc cluster's socket, in Envoy's
// warming order (CDS, then EDS for every EDS cluster, then LDS, then RDS
// for every route name), ACKing what it accepts and NACKing, with the
// reason, what fails Envoy's proto validation or names something missing;
// SotW SDS over the sds-grpc cluster's socket for every secret the config
// names, checking that the workload chain verifies to ROOTCA; secrets the
// config asks of ADS (credentialName) on the ADS stream, which pilot-agent
// forwards to istiod, a cluster or listener warming until they are
// answered (Envoy waits up to the source's initial fetch timeout); and the admin
// endpoints pilot-agent reads (/stats for readiness, /drain_listeners on
// shutdown).
//
// Everything it holds is written as JSON, atomically on every change, to
// the file named by --standin-state, by default standin-state.json beside
// the bootstrap (pilot-agent's configPath, which the test chooses), so a
// test can read it. It exits on SIGTERM
// or SIGINT, and when its parent (the agent) goes away.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// stateFile is the state file's name beside the bootstrap when
// --standin-state is not given.
const stateFile = "standin-state.json"

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "envoystandin")
	if err := run(os.Args[1:], log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(args []string, log *slog.Logger) error {
	opts, err := parseArgs(args)
	if err != nil {
		return err
	}
	for _, f := range opts.ignored {
		log.Info("ignoring flag", "flag", f)
	}
	if opts.statePath == "" {
		opts.statePath = filepath.Join(filepath.Dir(opts.configPath), stateFile)
	}
	boot, err := readBootstrap(opts.configPath)
	if err != nil {
		return err
	}
	log.Info("bootstrap read", "node", boot.node.GetId(), "xds", boot.xdsPath, "admin", boot.adminAddr)

	st := newStore(opts.statePath, log)
	st.setStart(args, boot)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	g, ctx := errgroup.WithContext(ctx)
	sds := newSDS(boot, st, log)
	ads := newADS(boot, st, sds, log)
	g.Go(func() error { return serveAdmin(ctx, boot.adminAddr, st, log) })
	g.Go(func() error { return ads.run(ctx) })
	g.Go(func() error { return sds.run(ctx) })
	g.Go(func() error { return watchParent(ctx) })
	err = g.Wait()
	st.finish()
	if errors.Is(err, errParentGone) {
		log.Info("parent exited")
		return nil
	}
	return err
}

var errParentGone = errors.New("parent process exited")

// watchParent returns when the process that started this one exits, so a
// killed agent does not leave its stand-in behind.
func watchParent(ctx context.Context) error {
	parent := os.Getppid()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if os.Getppid() != parent {
				return errParentGone
			}
		}
	}
}

// options are the parts of Envoy's command line the stand-in reads.
type options struct {
	configPath string
	statePath  string
	ignored    []string
}

// Envoy's flags that take a value (pilot-agent passes some of them; the
// rest are accepted so that another caller's command line parses too).
var valueFlags = map[string]bool{
	"-c": true, "--config-path": true, "--config-yaml": true, "--drain-time-s": true,
	"--drain-strategy": true, "--local-address-ip-version": true, "--file-flush-interval-msec": true,
	"--file-flush-min-size-kb": true, "-l": true, "--log-level": true, "--component-log-level": true,
	"--concurrency": true, "--parent-shutdown-time-s": true, "--service-cluster": true,
	"--service-node": true, "--service-zone": true, "--log-format": true, "--log-path": true,
	"--base-id": true, "--restart-epoch": true, "--mode": true, "--admin-address-path": true,
	"--socket-path": true, "--socket-mode": true, "--stats-tag": true,
}

// parseArgs reads -c (and --standin-state) and ignores every other flag:
// known ones with their value, unknown ones with the next word when it is
// not itself a flag.
func parseArgs(args []string) (options, error) {
	var o options
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if !strings.HasPrefix(name, "-") {
			o.ignored = append(o.ignored, args[i])
			continue
		}
		takes := valueFlags[name] || name == "--standin-state"
		if !hasValue && i+1 < len(args) && (takes || !strings.HasPrefix(args[i+1], "-")) {
			i++
			value, hasValue = args[i], true
		}
		switch name {
		case "-c", "--config-path":
			o.configPath = value
		case "--standin-state":
			o.statePath = value
		default:
			if hasValue {
				o.ignored = append(o.ignored, name+"="+value)
			} else {
				o.ignored = append(o.ignored, name)
			}
		}
		if takes && !hasValue {
			return o, fmt.Errorf("flag %s needs a value", name)
		}
	}
	if o.configPath == "" {
		return o, errors.New("no bootstrap: -c is required")
	}
	return o, nil
}
