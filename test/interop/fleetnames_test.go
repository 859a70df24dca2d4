package interop

import (
	"fmt"
	"strings"
	"sync"
)

// endpointHash hashes one "address:port" (FNV-1a, then a finalizer that
// spreads it, so that a sum of hashes is a fingerprint of the set).
func endpointHash(addr []byte, port uint64) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range addr {
		h = (h ^ uint64(c)) * 1099511628211
	}
	h = (h ^ port) * 1099511628211
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// fingerprintOf combines the sum of n endpoint hashes: equal for equal
// multisets of endpoints, in any order, and never 0 (which stands for "no
// answer yet").
func fingerprintOf(sum uint64, n int) uint64 {
	return (sum ^ uint64(n)*0x9e3779b97f4a7c15) | 1
}

// endpointsFingerprint is the fingerprint of "ip:port" addresses, as a
// load assignment holding exactly them decodes to.
func endpointsFingerprint(addrs []string) uint64 {
	var sum uint64
	for _, a := range addrs {
		i := strings.LastIndexByte(a, ':')
		var port uint64
		fmt.Sscan(a[i+1:], &port)
		sum += endpointHash([]byte(a[:i]), port)
	}
	return fingerprintOf(sum, len(addrs))
}

// emptyLoad is the fingerprint of a load assignment without endpoints, and
// of one the control plane removed.
var emptyLoad = fingerprintOf(0, 0)

// fleetNames interns resource names: every proxy holds the same few
// thousand, so each is stored once.
type fleetNames struct {
	mu sync.RWMutex
	m  map[string]string
}

func (n *fleetNames) get(b []byte) string {
	n.mu.RLock()
	s, ok := n.m[string(b)]
	n.mu.RUnlock()
	if ok {
		return s
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.m[string(b)]; ok {
		return s
	}
	if n.m == nil {
		n.m = map[string]string{}
	}
	s = string(b)
	n.m[s] = s
	return s
}
