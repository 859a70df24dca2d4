package interop

import (
	"fmt"
	"strings"
	"sync"
)

// benchNotes is what the benchmarks write for their reader (tables of
// runs, how long a peer took to build), kept until every test and
// benchmark of the binary has run. Written as it happens, a note lands
// between a benchmark's name and its numbers, which go test prints
// apart: the result line is split and benchstat loses it.
var benchNotes struct {
	sync.Mutex
	strings.Builder
}

// benchNote adds a note, formatted as fmt.Sprintf does.
func benchNote(format string, args ...any) {
	benchNotes.Lock()
	defer benchNotes.Unlock()
	fmt.Fprintf(&benchNotes.Builder, format, args...)
}

// printBenchNotes prints the notes, after every result line.
func printBenchNotes() {
	benchNotes.Lock()
	defer benchNotes.Unlock()
	fmt.Print(benchNotes.String())
}
