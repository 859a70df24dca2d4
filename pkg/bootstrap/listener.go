package bootstrap

import (
	"net"
	"sync"
	"time"
)

// shedListener bounds the open connections of a listener. A connection over
// the bound is accepted and closed at once, so its client learns at once
// and reconnects with its own backoff. netutil.LimitListener instead stops
// accepting at the bound: new connections then wait in the kernel's listen
// queue, and once that is full the kernel drops SYNs, so every client, not
// only those over the bound, waits out TCP's SYN backoff (1, 3, 7, 15,
// 31 s) and may pass its connect deadline without any answer.
type shedListener struct {
	net.Listener
	slots chan struct{}
}

func newShedListener(ln net.Listener, n int) *shedListener {
	return &shedListener{Listener: ln, slots: make(chan struct{}, n)}
}

func (l *shedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

// slotConn gives its slot back when closed.
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// connectionTimeout bounds a new connection's TLS handshake and HTTP/2
// preface on the server. It matches gRPC clients' own minimum connect
// deadline (20 s): when thousands of proxies connect at once the
// handshakes share the CPU and finish late together, and a shorter server
// bound cuts handshakes the client still waits for, so that they start
// over from scratch and add to the load that made them slow.
const connectionTimeout = 20 * time.Second
