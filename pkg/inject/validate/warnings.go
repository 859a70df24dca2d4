package validate

import (
	"encoding/json"
	"fmt"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// maxWarnings bounds the warnings of one object; the apiserver passes them
// all to the client.
const maxWarnings = 10

// warnings say what Bulwark ignores of the object raw of kind k, as
// package policy says: the whole object for a kind it does not read, the
// fields it does not read otherwise. A raw object that cannot be decoded
// gets the warnings a kind not read always gets, and no others.
func warnings(k policy.Kind, raw []byte) []string {
	var obj struct {
		Metadata struct {
			Name         string            `json:"name"`
			GenerateName string            `json:"generateName"`
			Namespace    string            `json:"namespace"`
			Annotations  map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	}
	_ = json.Unmarshal(raw, &obj) // what does not decode has no fields to report
	ignored := k.Ignored(obj.Metadata.Annotations, obj.Spec)
	if len(ignored) == 0 {
		return nil
	}
	name := obj.Metadata.Name
	if name == "" {
		name = obj.Metadata.GenerateName + "*"
	}
	if obj.Metadata.Namespace != "" {
		name = obj.Metadata.Namespace + "/" + name
	}
	out := make([]string, 0, min(len(ignored), maxWarnings+1))
	for i, what := range ignored {
		if i == maxWarnings {
			out = append(out, fmt.Sprintf("%s %s: and %d more fields Bulwark ignores", k.Name, name, len(ignored)-i))
			break
		}
		out = append(out, fmt.Sprintf("%s %s is not honoured as written: %s", k.Name, name, what))
	}
	return out
}
