package inject

import (
	"fmt"
	"sync/atomic"
)

// Snapshot is one consistent, immutable pair of config and values.
type Snapshot struct {
	Config *Config
	Values *Values
}

// Store holds the current Snapshot. Readers never block; Update swaps the
// whole snapshot at once and keeps the last good one when input is bad.
type Store struct {
	cur atomic.Pointer[Snapshot]
}

// NewStore returns a Store holding the built-in defaults.
func NewStore() *Store {
	cfg, vals, err := ParseConfig(nil, nil)
	if err != nil {
		// The defaults are embedded and covered by tests.
		panic(fmt.Sprintf("inject: built-in defaults are invalid: %v", err))
	}
	s := &Store{}
	s.cur.Store(&Snapshot{Config: cfg, Values: vals})
	return s
}

// Load returns the current snapshot. Callers must not modify it.
func (s *Store) Load() *Snapshot { return s.cur.Load() }

// Update parses the ConfigMap keys and, if they are valid, makes them
// current. On error the previous snapshot stays in force.
func (s *Store) Update(configYAML, valuesJSON []byte) error {
	cfg, vals, err := ParseConfig(configYAML, valuesJSON)
	if err != nil {
		return fmt.Errorf("update injector config: %w", err)
	}
	s.cur.Store(&Snapshot{Config: cfg, Values: vals})
	return nil
}
