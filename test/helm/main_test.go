package helm

import (
	"os"
	"testing"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// One real kube-apiserver for the package, started by the first test that
// asks for it; the render and lint tests never do and pay nothing. The
// istiod binary is built the same way, on first use.
func TestMain(m *testing.M) {
	code := testenv.Run(m)
	removeIstiodBinary()
	os.Exit(code)
}
