package xds

import (
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestCodecEncodesResponsesAsProtobufDoes(t *testing.T) {
	big := &anypb.Any{TypeUrl: resourceTypeForTest, Value: make([]byte, 70000)} // over referenceBytes
	big.Value[0], big.Value[69999] = 1, 2
	small := &anypb.Any{TypeUrl: resourceTypeForTest, Value: []byte("abc")}
	empty := &anypb.Any{TypeUrl: resourceTypeForTest}
	odd := &anypb.Any{TypeUrl: resourceTypeForTest, Value: []byte("x")}
	odd.ProtoReflect().SetUnknown([]byte{0x18, 0x01}) // field 3, varint 1
	for name, msg := range map[string]proto.Message{
		"a state-of-the-world response": &discovery.DiscoveryResponse{
			VersionInfo: "v1", TypeUrl: resourceTypeForTest, Nonce: "n1",
			Resources: []*anypb.Any{small, big, empty, odd}, ControlPlane: &core.ControlPlane{Identifier: "istiod"},
		},
		"a state-of-the-world response without resources": &discovery.DiscoveryResponse{VersionInfo: "v2", TypeUrl: resourceTypeForTest, Nonce: "n2"},
		"a delta response": &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: "s", TypeUrl: resourceTypeForTest, Nonce: "n3", RemovedResources: []string{"gone-1", "gone-2"},
			Resources: []*discovery.Resource{
				{Name: "a", Version: "1", Resource: small},
				{Name: "b", Version: "2", Resource: big},
				{Name: "c", Version: "3", Resource: empty},
				{Name: "d", Version: "4", Resource: odd},
				{Name: "e", Version: "5", Resource: small, Aliases: []string{"e2"}, Ttl: durationpb.New(5)},
				{Name: "f"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := Codec().Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			got := msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(data.Materialize(), got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, msg) {
				t.Errorf("decoded\n%v\nwant\n%v", got, msg)
			}
		})
	}
}

func TestCodecDoesNotCopyResources(t *testing.T) {
	value := make([]byte, referenceBytes)
	data, err := Codec().Marshal(&discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{
		{Name: "a", Version: "1", Resource: &anypb.Any{TypeUrl: resourceTypeForTest, Value: value}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !referenced(data, value) {
		t.Error("the resource's bytes were copied into the message")
	}
}

func referenced(data mem.BufferSlice, b []byte) bool {
	for _, buf := range data {
		if r := buf.ReadOnlyData(); len(r) == len(b) && &r[0] == &b[0] {
			return true
		}
	}
	return false
}

const resourceTypeForTest = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// BenchmarkCodec is the cost of encoding a response, by gRPC's proto codec
// and by Codec, for a proxyless client's few resources and an Envoy
// sidecar's thousand.
func BenchmarkCodec(b *testing.B) {
	for _, n := range []int{3, 1000} {
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: resourceTypeForTest, Nonce: "1", SystemVersionInfo: "v"}
		for i := range n {
			resp.Resources = append(resp.Resources, &discovery.Resource{
				Name: fmt.Sprintf("outbound|80||svc-%d.bench.svc.cluster.local", i), Version: "0123456789abcdef",
				Resource: &anypb.Any{TypeUrl: resourceTypeForTest, Value: make([]byte, 1100)},
			})
		}
		for name, c := range map[string]encoding.CodecV2{"proto": encoding.GetCodecV2(grpcproto.Name), "xds": Codec()} {
			b.Run(fmt.Sprintf("%s/resources=%d", name, n), func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					data, err := c.Marshal(resp)
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			})
		}
	}
}

// TestCodecKnowsEveryResourceField fails when go-control-plane's Resource
// gains a field that plainResource does not check: a Resource setting it
// would lose it on the wire.
func TestCodecKnowsEveryResourceField(t *testing.T) {
	known := map[string]bool{
		"name": true, "version": true, "resource": true, // encoded
		"aliases": true, "ttl": true, "cache_control": true, "metadata": true, "resource_name": true, // checked
	}
	fields := (&discovery.Resource{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if f := fields.Get(i); !known[string(f.Name())] {
			t.Errorf("Resource field %s is unknown to the codec", f.Name())
		}
	}
}

// TestDeltaResourcesAreShared: the resources of an incremental response
// are the push state's, whichever responses send them; the codec
// references their bytes; and a response decodes, through either codec,
// to the resources as protobuf has them.
func TestDeltaResourcesAreShared(t *testing.T) {
	big := &anypb.Any{TypeUrl: resourceTypeForTest, Value: make([]byte, 70000)}
	big.Value[0], big.Value[69999] = 1, 2
	odd := &anypb.Any{TypeUrl: resourceTypeForTest, Value: []byte("x")}
	odd.ProtoReflect().SetUnknown([]byte{0x18, 0x01})
	r := &response{gen: []generated{
		{name: "a", hash: "1", any: &anypb.Any{TypeUrl: resourceTypeForTest, Value: []byte("abc")}},
		{name: "b", hash: "2", any: big, delta: &discovery.Resource{Name: "b", Version: "2", Resource: big}}, // as the push state builds it
		{name: "c", hash: "3", any: &anypb.Any{TypeUrl: resourceTypeForTest}},
		{name: "d", hash: "4", any: odd},
	}}
	r.finish(sharedKey{})
	for name, tc := range map[string]struct {
		held map[string]string
		want []string
	}{
		"a client holding nothing is sent all":         {want: []string{"a", "b", "c", "d"}},
		"a client holding some is sent the others":     {held: map[string]string{"a": "1", "c": "3"}, want: []string{"b", "d"}},
		"a client holding older versions is sent them": {held: map[string]string{"a": "0", "b": "2", "d": "4"}, want: []string{"a", "c"}},
		"a client holding all is sent none":            {held: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}},
	} {
		t.Run(name, func(t *testing.T) {
			resp := &discovery.DeltaDiscoveryResponse{TypeUrl: resourceTypeForTest, Nonce: "7"}
			n, _ := selectDelta(resp, r, heldOf(tc.held, nil))
			want := &discovery.DeltaDiscoveryResponse{TypeUrl: resourceTypeForTest, Nonce: "7"}
			for _, g := range r.gen {
				if slices.Contains(tc.want, g.name) {
					want.Resources = append(want.Resources, &discovery.Resource{Name: g.name, Version: g.hash, Resource: g.any})
				}
			}
			if n != len(tc.want) {
				t.Errorf("%d resources selected, want %d", n, len(tc.want))
			}
			for codecName, c := range map[string]encoding.CodecV2{"proto": encoding.GetCodecV2(grpcproto.Name), "xds": Codec()} {
				data, err := c.Marshal(resp)
				if err != nil {
					t.Fatal(err)
				}
				got := &discovery.DeltaDiscoveryResponse{}
				if err := proto.Unmarshal(data.Materialize(), got); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, want) {
					t.Errorf("%s: decoded\n%v\nwant\n%v", codecName, got, want)
				}
			}
		})
	}
	all := &discovery.DeltaDiscoveryResponse{}
	selectDelta(all, r, heldOf(nil, nil))
	data, err := Codec().Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	if !referenced(data, big.Value) {
		t.Error("the codec copied a response's resource")
	}
	again := &discovery.DeltaDiscoveryResponse{}
	selectDelta(again, r, heldOf(map[string]string{"a": "1"}, nil))
	if again.Resources[0] != r.gen[1].delta || all.Resources[1] != r.gen[1].delta {
		t.Error("a response made its own copy of a resource the push state built")
	}
}
