// Command istiod is Bulwark's control plane: a certificate authority serving
// Istio's CSR API, plus the mesh's configuration services.
//
//	istiod [discovery] [flags]   run the control plane (the default)
//	istiod mint-cert [flags]     issue a client certificate from the local CA
//	istiod ca rotate|status|reset  the CA's root rotation and keys
//	istiod migrate check [flags] the preflight of a move from Istio's istiod
//	istiod version               print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	// Roots for verifying public issuers where the system has none, as in
	// the image `make image` builds: they apply only when the system's
	// roots are missing, and --jwt-ca-file overrides both.
	_ "golang.org/x/crypto/x509roots/fallback"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "discovery"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch cmd {
	case "discovery":
		err = discovery(ctx, args, getenv, stderr)
	case "mint-cert":
		err = mintCert(ctx, args, getenv, stdout, stderr)
	case "ca":
		err = caCommand(ctx, args, getenv, stdout, stderr)
	case "migrate":
		err = migrateCommand(ctx, args, getenv, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version)
	default:
		fmt.Fprintf(stderr, "istiod: unknown command %q (want discovery, mint-cert, ca, migrate or version)\n", cmd)
		return exitUsage
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "istiod %s: %v\n", cmd, err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "istiod %s: %v\n", cmd, err)
		return exitError
	}
}

// usageError is a mistake in the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// newLogger builds the process logger: text (default) or json on stderr.
func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: %w", level, err)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
	}
}
