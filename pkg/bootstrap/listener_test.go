package bootstrap

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestShedListenerClosesConnectionsOverTheBound: with one slot taken, a
// second client is closed at once rather than left waiting, and after the
// first connection closes a new one is served.
func TestShedListenerClosesConnectionsOverTheBound(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newShedListener(inner, 1)
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	first := <-accepted

	over := dial()
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := over.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("connection over the bound: read %v, want it closed", err)
	}

	first.Close()
	first.Close() // a second Close gives back nothing more
	dial()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted after a slot was freed")
	}
	if len(ln.slots) != 1 {
		t.Fatalf("%d slots taken, want 1", len(ln.slots))
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
