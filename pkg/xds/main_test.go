package xds

import (
	"os"
	"testing"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// TestMain runs a real kube-apiserver for the tests that ask for one.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
