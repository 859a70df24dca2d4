package xds

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzNodeMetadata feeds arbitrary JSON as node metadata: parsing must
// return an error or metadata naming a valid identity, never panic.
func FuzzNodeMetadata(f *testing.F) {
	for _, s := range []string{
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","GENERATOR":"grpc","LABELS":{"app":"x"}}`,
		`{"INSTANCE_IPS":1}`,
		`{"NAMESPACE":["app"],"SERVICE_ACCOUNT":"a"}`,
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"a","LABELS":{"x":1}}`,
		`{"NAMESPACE":"../..","SERVICE_ACCOUNT":"a"}`,
		`{"NAMESPACE":"app","SERVICE_ACCOUNT":"a/b"}`,
		`{"NAMESPACE":null,"SERVICE_ACCOUNT":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var md structpb.Struct
		if err := protojson.Unmarshal(data, &md); err != nil {
			return
		}
		m, err := ParseMetadata(&md)
		if err != nil {
			return
		}
		if _, err := m.Identity(testTD); err != nil {
			t.Fatalf("accepted metadata without a valid identity: %v", err)
		}
	})
}

func TestParseMetadata(t *testing.T) {
	tests := map[string]struct {
		json string
		ok   bool
	}{
		"pilot-agent's proxyless metadata parses": {ok: true, json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","GENERATOR":"grpc","INSTANCE_IPS":"10.0.0.1,fd00::1","LABELS":{"app":"client"},"ISTIO_VERSION":"1.24.0","PROXY_CONFIG":{"concurrency":2}}`},
		"a numeric INSTANCE_IPS is an error":      {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","INSTANCE_IPS":1}`},
		"a numeric label is an error":             {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","LABELS":{"x":1}}`},
		"LABELS as a list is an error":            {json: `{"NAMESPACE":"app","SERVICE_ACCOUNT":"client","LABELS":["x"]}`},
		"a lower-case namespace key is not read":  {json: `{"namespace":"app","SERVICE_ACCOUNT":"client"}`},
		"a missing service account is an error":   {json: `{"NAMESPACE":"app"}`},
		"a slash in the namespace is an error":    {json: `{"NAMESPACE":"app/sa/x","SERVICE_ACCOUNT":"client"}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var md structpb.Struct
			if err := protojson.Unmarshal([]byte(tc.json), &md); err != nil {
				t.Fatal(err)
			}
			_, err := ParseMetadata(&md)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %t", err, tc.ok)
			}
		})
	}
}
