package debug

import "testing"

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "127.8.9.10:1": true, "[::1]:1": true, "[::ffff:127.0.0.1]:1": true,
		"10.0.0.1:1": false, "[fe80::1]:1": false, "0.0.0.0:1": false, "127.0.0.1": false, "": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
