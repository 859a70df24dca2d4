package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
)

// resetConfirmFlag must be given for `istiod ca reset` to delete anything.
const resetConfirmFlag = "yes-delete-the-ca-keys"

// caReset is `istiod ca reset`: with istiod stopped, it deletes the CA's
// keys and rotation state, so that the next istiod to start signs with a
// new self-signed root. Without the confirmation flag it changes nothing.
func caReset(ctx context.Context, cfg bootstrap.Config, confirmed bool, log *slog.Logger, stdout io.Writer) error {
	if !confirmed {
		return usageError{fmt.Errorf("ca reset deletes the CA's keys and root rotation state, and no workload certificate they signed is trusted afterwards; stop istiod, then run it again with --%s", resetConfirmFlag)}
	}
	deleted, err := bootstrap.ResetCA(ctx, cfg, log)
	for _, d := range deleted {
		fmt.Fprintf(stdout, "deleted %s\n", d)
	}
	if err != nil {
		return err
	}
	if len(deleted) == 0 {
		fmt.Fprintln(stdout, "nothing to delete: no CA keys are stored")
	}
	fmt.Fprintln(stdout, "the next istiod to start makes a new self-signed root; restart every workload so that it gets a certificate from it")
	return nil
}
