package keyfetch

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tarpit accepts connections on ip and never answers; it counts the
// connections the client closed, and tells ended of each.
type tarpit struct {
	URL  string
	shut atomic.Int32
}

func newTarpit(t *testing.T, ip string, ended chan<- struct{}) *tarpit {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	tp := &tarpit{URL: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(io.Discard, c) // until the client gives up
				tp.shut.Add(1)
				select {
				case ended <- struct{}{}:
				default:
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return tp
}

// TestJWKSCacheTarpitsDelayNoOne: twenty sources that accept connections
// and never answer, each on its own host, do not hold back the key set
// of another issuer: it is published while every tarpit fetch is still
// waiting for its answer, so within one fetch timeout.
func TestJWKSCacheTarpitsDelayNoOne(t *testing.T) {
	good := newJWKSIssuer(t, keySetJSON(t, newSigner(t, "good")))
	c, _, _ := testClient(t, Config{Timeout: DefaultTimeout}, nil)
	cache := c.JWKSCache(URLRule{LoopbackHTTP: true})
	updates, cancel := cache.Subscribe()
	defer cancel()

	ended := make(chan struct{}, 64)
	var srcs []JWKSSource
	var pits []*tarpit
	for i := range 20 {
		tp := newTarpit(t, fmt.Sprintf("127.0.0.%d", 10+i), ended)
		pits = append(pits, tp)
		src := JWKSSource{Issuer: tp.URL} // by discovery
		if i%2 == 0 {
			src = JWKSSource{Issuer: "https://tarpit.example/" + fmt.Sprint(i), JWKSURI: tp.URL + "/keys"}
		}
		srcs = append(srcs, src)
	}
	want := JWKSSource{Issuer: good.URL, JWKSURI: good.URL + "/keys"}
	srcs = append(srcs, want)

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- cache.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cache.Want(srcs)
	for {
		select {
		case snap := <-updates:
			if _, ok := snap.JWKS(want); !ok {
				continue
			}
			var shut int32
			for _, tp := range pits {
				shut += tp.shut.Load()
			}
			if shut != 0 {
				t.Fatalf("the good key set was published after %d tarpit fetches gave up", shut)
			}
			return
		case <-ended:
			t.Fatal("a tarpit fetch timed out before the good key set was published")
		}
	}
}

// TestJWKSCacheFetchesPerHost: the key sets of one host are fetched at
// most maxFetchesPerHost at a time, and all of them in the end.
func TestJWKSCacheFetchesPerHost(t *testing.T) {
	const n = 3 * maxFetchesPerHost
	keys := keySetJSON(t, newSigner(t, "a"))
	var inflight, most atomic.Int32
	arrived := make(chan struct{}, n)
	release := make(chan struct{})
	srv, _ := serveOn(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := inflight.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		inflight.Add(-1)
		writeBody(w, "application/json", keys)
	}))
	c, _, _ := testClient(t, Config{}, nil)
	cache := c.JWKSCache(URLRule{LoopbackHTTP: true})
	var srcs []JWKSSource
	for i := range n {
		srcs = append(srcs, JWKSSource{Issuer: fmt.Sprint("https://issuer.example/", i), JWKSURI: fmt.Sprint(srv.URL, "/keys/", i)})
	}
	cache.Want(srcs)
	refreshed := make(chan struct{})
	go func() { cache.RefreshDue(t.Context()); close(refreshed) }()

	timeout := time.After(time.Minute) // a guard, not a measure
	wait := func() {
		t.Helper()
		select {
		case <-arrived:
		case <-timeout:
			t.Fatalf("%d requests in flight, waiting for more", inflight.Load())
		}
	}
	for range maxFetchesPerHost {
		wait()
	}
	for i := range n {
		release <- struct{}{}
		if i+maxFetchesPerHost < n {
			wait()
		}
	}
	<-refreshed
	if m := most.Load(); m != maxFetchesPerHost {
		t.Errorf("at most %d fetches from one host at once, want %d", m, maxFetchesPerHost)
	}
	for _, s := range srcs {
		if _, ok := cache.Current().JWKS(s); !ok {
			t.Errorf("%s not fetched", s)
		}
	}
}
