package ca_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// rotationWriterEnv marks the run of this test binary that writes the
// rotation state in the directory it names, as another process beside
// the test's own writers (rotationstore_test.go).
const (
	rotationWriterEnv      = "BULWARK_TEST_ROTATION_WRITER_DIR"
	rotationWriterSavesEnv = "BULWARK_TEST_ROTATION_WRITER_SAVES"
)

// TestMain runs the writer in its child run, and the tests otherwise.
func TestMain(m *testing.M) {
	if dir := os.Getenv(rotationWriterEnv); dir != "" {
		os.Exit(rotationWriterChild(dir))
	}
	os.Exit(m.Run())
}

// rotationWriterChild says it is ready, waits for a line on stdin, then
// makes its saves and prints how many it made.
func rotationWriterChild(dir string) int {
	n, err := strconv.Atoi(os.Getenv(rotationWriterSavesEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "saves:", err)
		return 2
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "wait for the start:", err)
		return 2
	}
	saves, err := countSaves(context.Background(), ca.NewDirRotationStore(dir), n, -1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(saves)
	return 0
}
