package bench

import (
	"os"
	"testing"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// The Kubernetes benchmarks share one real kube-apiserver, started on first use.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
