package inject

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
)

// applyPatch applies add, remove and replace operations (all CreatePatch
// emits) to a JSON document, the way kube-apiserver does, so tests check
// the patch itself and not only the mutated object.
func applyPatch(doc []byte, ops []jsonpatch.Operation) ([]byte, error) {
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("decode document: %w", err)
	}
	for _, op := range ops {
		// Round-trip the value so it has plain JSON types.
		var val any
		if op.Operation != "remove" {
			b, err := json.Marshal(op.Value)
			if err != nil {
				return nil, fmt.Errorf("encode value: %w", err)
			}
			if err := json.Unmarshal(b, &val); err != nil {
				return nil, fmt.Errorf("decode value: %w", err)
			}
		}
		var err error
		root, err = applyOp(root, splitPointer(op.Path), op.Operation, val)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", op.Operation, op.Path, err)
		}
	}
	return json.Marshal(root)
}

func splitPointer(p string) []string {
	if p == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
	}
	return parts
}

func applyOp(node any, path []string, op string, val any) (any, error) {
	if len(path) == 0 {
		if op == "remove" {
			return nil, nil
		}
		return val, nil
	}
	key, rest := path[0], path[1:]
	switch n := node.(type) {
	case map[string]any:
		if len(rest) == 0 {
			switch op {
			case "add", "replace":
				if _, ok := n[key]; !ok && op == "replace" {
					return nil, fmt.Errorf("no member %q", key)
				}
				n[key] = val
			case "remove":
				if _, ok := n[key]; !ok {
					return nil, fmt.Errorf("no member %q", key)
				}
				delete(n, key)
			}
			return n, nil
		}
		child, ok := n[key]
		if !ok {
			return nil, fmt.Errorf("no member %q", key)
		}
		c, err := applyOp(child, rest, op, val)
		if err != nil {
			return nil, err
		}
		n[key] = c
		return n, nil
	case []any:
		if key == "-" && len(rest) == 0 && op == "add" {
			return append(n, val), nil
		}
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i > len(n) || (i == len(n) && (op != "add" || len(rest) > 0)) {
			return nil, fmt.Errorf("bad index %q", key)
		}
		if len(rest) == 0 {
			switch op {
			case "add":
				n = append(n[:i], append([]any{val}, n[i:]...)...)
			case "replace":
				n[i] = val
			case "remove":
				n = append(n[:i], n[i+1:]...)
			}
			return n, nil
		}
		c, err := applyOp(n[i], rest, op, val)
		if err != nil {
			return nil, err
		}
		n[i] = c
		return n, nil
	}
	return nil, fmt.Errorf("cannot descend into %T", node)
}

// patchOp is the wire form of one operation in an AdmissionResponse.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func toOps(in []patchOp) []jsonpatch.Operation {
	out := make([]jsonpatch.Operation, len(in))
	for i, o := range in {
		out[i] = jsonpatch.Operation{Operation: o.Op, Path: o.Path, Value: o.Value}
	}
	return out
}
