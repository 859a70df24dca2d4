package authn

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Limits of ClusterAliases.
const (
	// MaxClusterAliases bounds the aliases istiod is given.
	MaxClusterAliases = 64
	// maxAliasClusterID bounds a cluster ID an alias names or is (a
	// remote secret's data key, whose ID it is, is at most 253 bytes).
	maxAliasClusterID = 253
)

// ClusterAliases are Istio's --clusterAliases: old cluster IDs (the keys)
// that stand for current ones (the values). A proxy still configured
// with an old ID (its agent's ClusterID header, its node metadata
// CLUSTER_ID) is the current cluster's: its token is reviewed there and
// it is bound to that cluster, never to a cluster registered under the
// old ID (a remote secret naming an alias is refused). Read only; build
// with ParseClusterAliases or check with Validate.
type ClusterAliases map[string]string

// Resolve is the cluster id stands for: its alias's target, else id.
func (a ClusterAliases) Resolve(id string) string {
	if to, ok := a[id]; ok {
		return to
	}
	return id
}

// Validate checks the aliases against istiod's own cluster ID own: at
// most MaxClusterAliases; every ID 1-253 bytes of letters, digits, '-',
// '_' and '.' (a Secret data key, as a remote secret names a cluster);
// no alias of its own target, of istiod's own ID (own is always itself),
// or of an ID that is itself an alias (no chains); at most one alias per
// cluster, as Istio's pilot-discovery requires.
func (a ClusterAliases) Validate(own string) error {
	if len(a) > MaxClusterAliases {
		return fmt.Errorf("cluster aliases: %d, limit %d", len(a), MaxClusterAliases)
	}
	byTarget := make(map[string]string, len(a))
	for _, alias := range slices.Sorted(maps.Keys(a)) {
		to := a[alias]
		for _, id := range [...]string{alias, to} {
			if err := checkAliasID(id); err != nil {
				return fmt.Errorf("cluster alias %.64q=%.64q: %w", alias, to, err)
			}
		}
		switch {
		case alias == to:
			return fmt.Errorf("cluster alias %q names itself", alias)
		case alias == own:
			return fmt.Errorf("cluster alias %q is istiod's own cluster ID", alias)
		}
		if _, chained := a[to]; chained {
			return fmt.Errorf("cluster alias %q=%q: %q is itself an alias", alias, to, to)
		}
		if other, ok := byTarget[to]; ok {
			return fmt.Errorf("cluster %q has two aliases, %q and %q; give it one", to, other, alias)
		}
		byTarget[to] = alias
	}
	return nil
}

// checkAliasID checks one cluster ID of an alias.
func checkAliasID(id string) error {
	if id == "" || len(id) > maxAliasClusterID {
		return fmt.Errorf("a cluster ID must be 1-%d bytes, not %d", maxAliasClusterID, len(id))
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("a cluster ID is letters, digits, '-', '_' and '.'; %q is not", r)
		}
	}
	return nil
}

// ParseClusterAliases reads Istio's --clusterAliases value,
// "<alias>=<cluster>[,<alias>=<cluster>...]", spaces around each name
// ignored; "" is none. An alias given twice is refused. The result is not
// validated (Validate).
func ParseClusterAliases(s string) (ClusterAliases, error) {
	if len(s) > MaxClusterAliases*(2*maxAliasClusterID+2) {
		return nil, fmt.Errorf("cluster aliases: %d bytes, limit %d", len(s), MaxClusterAliases*(2*maxAliasClusterID+2))
	}
	out := ClusterAliases{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		alias, to, ok := strings.Cut(pair, "=")
		alias, to = strings.TrimSpace(alias), strings.TrimSpace(to)
		if !ok {
			return nil, fmt.Errorf("cluster alias %.64q: want <alias>=<cluster>", pair)
		}
		if prev, dup := out[alias]; dup {
			return nil, fmt.Errorf("cluster alias %.64q given twice (=%.64q, =%.64q)", alias, prev, to)
		}
		out[alias] = to
		if len(out) > MaxClusterAliases {
			return nil, fmt.Errorf("cluster aliases: more than %d", MaxClusterAliases)
		}
	}
	return out, nil
}
