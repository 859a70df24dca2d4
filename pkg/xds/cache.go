package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// validator is implemented by every go-control-plane resource type.
type validator interface{ ValidateAll() error }

// pushState is one model snapshot with its marshalled resources, shared by
// every proxy that generates from it.
type pushState struct {
	snap      *model.Snapshot
	changedAt time.Time // first model change this push carries; zero at start

	mu    sync.Mutex
	built map[string]*builtResource
}

type builtResource struct {
	once sync.Once
	any  *anypb.Any
	hash string
	err  error
}

func newPushState(snap *model.Snapshot, changedAt time.Time) *pushState {
	return &pushState{snap: snap, changedAt: changedAt, built: make(map[string]*builtResource)}
}

// resource returns r marshalled, building it once per snapshot and key.
func (st *pushState) resource(r grpcgen.Resource) (*builtResource, error) {
	st.mu.Lock()
	b, ok := st.built[r.Key]
	if !ok {
		b = &builtResource{}
		st.built[r.Key] = b
	}
	st.mu.Unlock()
	b.once.Do(func() {
		msg, err := r.Build()
		if err != nil {
			b.err = err
			return
		}
		if v, ok := msg.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				b.err = fmt.Errorf("resource %s: %w", r.Name, err)
				return
			}
		}
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			b.err = fmt.Errorf("marshal %s: %w", r.Name, err)
			return
		}
		sum := sha256.Sum256(raw)
		b.hash = hex.EncodeToString(sum[:8])
		b.any = &anypb.Any{TypeUrl: "type.googleapis.com/" + string(msg.ProtoReflect().Descriptor().FullName()), Value: raw}
	})
	return b, b.err
}
