package authn

import (
	"testing"
	"time"
)

func TestReviewCache(t *testing.T) {
	key := func(b byte) [32]byte { return [32]byte{b} }
	res := func(name string) reviewResult { return reviewResult{pod: &Pod{Name: name}} }

	c := newExpiringCache[reviewResult](2)
	c.put(key(1), res("one"), t0.Add(time.Minute))
	c.put(key(2), res("two"), t0.Add(time.Minute))
	if _, ok := c.get(key(1), t0); !ok { // 1 is now the most recent
		t.Fatal("entry 1 missing")
	}
	c.put(key(3), res("three"), t0.Add(time.Minute)) // evicts 2
	if _, ok := c.get(key(2), t0); ok {
		t.Error("least recently used entry 2 was kept")
	}
	if r, ok := c.get(key(1), t0); !ok || r.pod.Name != "one" {
		t.Error("recently used entry 1 was evicted")
	}
	if _, ok := c.get(key(3), t0.Add(time.Minute)); ok {
		t.Error("entry 3 returned at its expiry")
	}
	if c.len() != 1 {
		t.Errorf("len = %d after expiry, want 1", c.len())
	}
	c.put(key(1), res("uno"), t0.Add(2*time.Minute))
	if r, ok := c.get(key(1), t0.Add(90*time.Second)); !ok || r.pod.Name != "uno" {
		t.Error("replacing an entry did not update it")
	}
}

func TestUnverifiedExpiry(t *testing.T) {
	tests := map[string]struct {
		token  string
		want   time.Time
		wantOK bool
	}{
		"an integer exp is read":       {token: unsignedJWT(t, map[string]any{"exp": 1780000000}), want: time.Unix(1780000000, 0), wantOK: true},
		"a missing exp is not usable":  {token: unsignedJWT(t, map[string]any{"sub": "x"})},
		"a string exp is not usable":   {token: unsignedJWT(t, map[string]any{"exp": "soon"})},
		"a negative exp is not usable": {token: unsignedJWT(t, map[string]any{"exp": -5})},
		"a huge exp is not usable":     {token: unsignedJWT(t, map[string]any{"exp": 1e300})},
		"two segments are not a JWS":   {token: "a.b"},
		"bad base64 is not usable":     {token: "a.!!!.c"},
		"a non-object payload is not usable": {
			token: "a." + b64([]byte(`[1,2]`)) + ".c",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := unverifiedExpiry(tc.token)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("unverifiedExpiry() = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
