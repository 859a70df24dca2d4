// Package proccpu reads the CPU time another process has used, for
// benchmarks that measure a server running as its own process.
package proccpu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// which is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// Of returns the user plus system CPU time of process pid so far, from
// /proc/<pid>/stat (Linux only), with a resolution of 10ms.
func Of(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("process cpu: %w", err)
	}
	// The command name is in parentheses and may hold spaces; utime and
	// stime are the 12th and 13th fields after it (14th and 15th overall).
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, errors.New("process cpu: malformed /proc stat")
	}
	fields := bytes.Fields(raw[end+1:])
	if len(fields) < 13 {
		return 0, errors.New("process cpu: short /proc stat")
	}
	utime, err := strconv.ParseInt(string(fields[11]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("process cpu: utime: %w", err)
	}
	stime, err := strconv.ParseInt(string(fields[12]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("process cpu: stime: %w", err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}
