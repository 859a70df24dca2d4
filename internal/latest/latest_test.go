package latest

import (
	"sync"
	"testing"
	"time"
)

func TestTheZeroValueHoldsNothing(t *testing.T) {
	var v Value[int]
	if x, ok := v.Load(); ok || x != 0 {
		t.Fatalf("Load = %d, %v; want nothing", x, ok)
	}
	ch, cancel := v.Subscribe(true)
	defer cancel()
	select {
	case x := <-ch:
		t.Fatalf("a subscriber of an empty value got %d", x)
	default:
	}
}

func TestASubscriberGetsTheValuesStoredAfterIt(t *testing.T) {
	var v Value[string]
	v.Store("before")
	plain, cancelPlain := v.Subscribe(false)
	defer cancelPlain()
	replayed, cancelReplayed := v.Subscribe(true)
	defer cancelReplayed()
	if got := <-replayed; got != "before" {
		t.Fatalf("replayed %q, want the value held", got)
	}
	select {
	case got := <-plain:
		t.Fatalf("a subscriber without replay got %q before any store", got)
	default:
	}
	v.Store("after")
	for name, ch := range map[string]<-chan string{"plain": plain, "replayed": replayed} {
		if got := <-ch; got != "after" {
			t.Errorf("%s: got %q, want after", name, got)
		}
	}
	if got, _ := v.Load(); got != "after" {
		t.Errorf("Load = %q", got)
	}
}

func TestASlowSubscriberGetsTheLatestAndStoreNeverBlocks(t *testing.T) {
	var v Value[int]
	ch, cancel := v.Subscribe(false)
	defer cancel()
	for i := 1; i <= 1000; i++ {
		v.Store(i) // would block on a full channel if it did not replace
	}
	if got := <-ch; got != 1000 {
		t.Fatalf("got %d, want the latest, 1000", got)
	}
	select {
	case got := <-ch:
		t.Fatalf("got %d after the latest", got)
	default:
	}
}

func TestUpdateSeesThePreviousValueAndMayKeepIt(t *testing.T) {
	var v Value[int]
	ch, cancel := v.Subscribe(false)
	defer cancel()
	v.Update(func(old int, ok bool) (int, bool) {
		if ok {
			t.Errorf("first update saw %d", old)
		}
		return 1, true
	})
	<-ch
	v.Update(func(old int, ok bool) (int, bool) { return old, false })
	select {
	case got := <-ch:
		t.Fatalf("an update that kept the value delivered %d", got)
	default:
	}
}

func TestCancelClosesOnceAndStopsDelivery(t *testing.T) {
	var v Value[int]
	ch, cancel := v.Subscribe(false)
	cancel()
	cancel()
	v.Store(1) // no send on the closed channel
	if _, open := <-ch; open {
		t.Fatal("channel open after cancel")
	}
	if len(v.subs) != 0 {
		t.Fatalf("%d subscribers after cancel", len(v.subs))
	}
}

// Concurrent stores, subscriptions and cancels: every subscriber that
// reads until the last store ends with the latest value, values arrive in
// the order stored, and the race detector sees no unordered access.
func TestConcurrentStoresAndSubscribers(t *testing.T) {
	var v Value[int]
	const stores = 2000
	var wg sync.WaitGroup
	type result struct{ last, ordered int }
	results := make(chan result, 16)
	for range 16 {
		ch, cancel := v.Subscribe(true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			last, ordered := -1, 1
			for x := range ch {
				if x < last {
					ordered = 0
				}
				last = x
				if x == stores {
					break
				}
			}
			results <- result{last, ordered}
		}()
	}
	var churn sync.WaitGroup
	stop := make(chan struct{})
	churn.Add(1)
	go func() { // subscribers that come and go meanwhile
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, cancel := v.Subscribe(true)
			cancel()
		}
	}()
	var next sync.Mutex
	n := 0
	var storers sync.WaitGroup
	for range 4 {
		storers.Add(1)
		go func() {
			defer storers.Done()
			for {
				next.Lock()
				if n == stores {
					next.Unlock()
					return
				}
				n++
				x := n
				// Stored in the order counted: the counter's lock is
				// held across the store.
				v.Store(x)
				next.Unlock()
			}
		}()
	}
	storers.Wait()
	close(stop)
	churn.Wait()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a subscriber never got the latest value")
	}
	close(results)
	for r := range results {
		if r.last != stores || r.ordered != 1 {
			t.Errorf("a subscriber ended at %d (ordered %v), want %d in order", r.last, r.ordered == 1, stores)
		}
	}
	if got, _ := v.Load(); got != stores {
		t.Errorf("Load = %d, want %d", got, stores)
	}
}
