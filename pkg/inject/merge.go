package inject

// mergeByKey merges patch into base the way Kubernetes' strategic merge
// patch merges a list with a merge key, which is how Istio lays its
// rendered template over a pod: an item of patch replaces the item of base
// with the same key; the relative order of each list is kept, and an item
// of base comes before an item of patch only when base already had both
// in that order. Matching Istio's order keeps injected pods identical.
func mergeByKey[T any](base, patch []T, key func(T) string) []T {
	pos := make(map[string]int, len(base))
	for i, x := range base {
		pos[key(x)] = i
	}
	inPatch := make(map[string]bool, len(patch))
	for _, x := range patch {
		inPatch[key(x)] = true
	}
	left := make([]T, 0, len(base))
	for _, x := range base {
		if !inPatch[key(x)] {
			left = append(left, x)
		}
	}
	out := make([]T, 0, len(left)+len(patch))
	i, j := 0, 0
	for i < len(left) || j < len(patch) {
		switch {
		case j >= len(patch):
			out = append(out, left[i])
			i++
		case i >= len(left):
			out = append(out, patch[j])
			j++
		default:
			li := pos[key(left[i])]
			ri, ok := pos[key(patch[j])]
			if ok && li < ri {
				out = append(out, left[i])
				i++
			} else {
				out = append(out, patch[j])
				j++
			}
		}
	}
	return out
}
