package kube

import (
	"os"
	"testing"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
