package debug

import (
	"net/http"
	"testing"
)

// A page larger than the limit is answered with an error, not sent whole.
func TestDebugPageOverTheLimit(t *testing.T) {
	w := &pageWriter{header: http.Header{}}
	chunk := make([]byte, 1<<20)
	var err error
	for range maxDebugPageBytes>>20 + 1 {
		if _, err = w.Write(chunk); err != nil {
			break
		}
	}
	if err == nil || !w.tooLarge || w.body.Len() > maxDebugPageBytes {
		t.Errorf("wrote %d bytes without error (%v)", w.body.Len(), err)
	}
}
