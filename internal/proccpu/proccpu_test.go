package proccpu

import (
	"os"
	"testing"
)

func TestOf(t *testing.T) {
	tests := map[string]struct {
		pid     int
		wantErr bool
	}{
		"this process has a CPU time":         {pid: os.Getpid()},
		"a process that does not exist fails": {pid: -1, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := Of(tc.pid)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Of(%d) = %v, %v; want error %v", tc.pid, d, err, tc.wantErr)
			}
			if err == nil && d < 0 {
				t.Errorf("Of(%d) = %v, want >= 0", tc.pid, d)
			}
		})
	}
}
