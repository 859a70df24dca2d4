package dirwatch

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is ReadFile's error for a file over its limit.
var ErrTooLarge = errors.New("larger than the limit")

// ReadFile reads a watched file, following symbolic links (a mounted
// ConfigMap's files are), and at most limit bytes of it: a larger file is
// ErrTooLarge, never read whole.
func ReadFile(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("read %s: %w of %d bytes", path, ErrTooLarge, limit)
	}
	return data, nil
}
