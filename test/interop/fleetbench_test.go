package interop

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// BenchmarkFleetVsIstio runs Istio's own pilot-discovery (built from this
// module's istio.io/istio) and Bulwark's istiod ($ISTIOD_BIN) in turn
// against the same objects on one real kube-apiserver, each driven by the
// same fleet of simulated Envoy sidecars over plaintext Delta ADS, and
// compares: the time for the fleet to hold its whole configuration, the
// spread of an endpoint move, of a burst of endpoint changes, of a new
// Service, of an AuthorizationPolicy edit, of a VirtualService one
// namespace sees, of one every proxy sees and of a DestinationRule subset
// (fleetrules_test.go):
// each one's p99 over the proxies it concerns, how many proxies were sent
// anything, the control plane's CPU for
// each, its memory per proxy and the bytes each proxy receives; and, for
// a few proxies, that both give the same outbound clusters and endpoints.
//
// Rounds alternate (Istio, Bulwark, Istio, …), each with a fresh control
// plane process on the same objects: a round's changes are undone once its
// control plane has stopped. Both run with their default debounce (100 ms
// quiet, 10 s at most) and their default limits on new streams; refused
// streams are retried with Envoy's backoff and counted. The table printed
// at the end has the medians of the rounds.
//
// Sizes: FLEET_SERVICES services of two pods each and FLEET_PROXIES
// sidecars, FLEET_ROUNDS rounds (default 3); without FLEET_SERVICES and
// FLEET_PROXIES, 500 services with 1,000 proxies and 1,000 services with
// 200 proxies. FLEET_CONTROL_PLANES=istio or =bulwark runs one alone.
// FLEET_PROFILE=<dir> keeps a CPU profile of Bulwark's istiod over each
// change, as <dir>/bulwark-<round>-<change>.pprof, and its heap before and
// after the proxies connect, as <dir>/heap-before-proxies-<round>.pprof
// and <dir>/heap-with-proxies-<round>.pprof.
//
//	cd test/interop && ISTIOD_BIN=../../bin/istiod go test -short -run '^$' -bench FleetVsIstio -benchtime 1x -timeout 90m .
func BenchmarkFleetVsIstio(b *testing.B) {
	if raceEnabled {
		b.Fatal("run the fleet benchmark without -race: it would measure the race detector")
	}
	sizes, err := fleetSizes()
	if err != nil {
		b.Fatal(err)
	}
	kinds, bins := fleetControlPlanes(b)
	raiseNoFile(b)
	env := testenv.Get(b)
	for _, size := range sizes {
		b.Run(fmt.Sprintf("services=%d,proxies=%d", size.services, size.proxies), func(b *testing.B) {
			mesh := newFleetMesh(b, env, size.services)
			meshFile, networksFile := fleetMeshConfig(b, mesh.root)
			results := map[string][]*fleetRound{}
			for round := 1; round <= size.rounds; round++ {
				for _, kind := range kinds {
					cp := startFleetCP(b, kind, bins[kind], env, mesh.root, meshFile, networksFile, round)
					results[kind] = append(results[kind], runFleetRound(b, size, mesh, cp, kind, round))
				}
			}
			reportFleet(b, size, kinds, results)
		})
	}
}

// fleetControlPlanes are the control planes $FLEET_CONTROL_PLANES names
// (both by default), in the order their rounds run, and their binaries.
func fleetControlPlanes(b *testing.B) (kinds []string, bins map[string]string) {
	kinds = strings.Split(cmp.Or(os.Getenv("FLEET_CONTROL_PLANES"), fleetIstio+","+fleetBulwark), ",")
	bins = map[string]string{}
	for _, kind := range kinds {
		switch kind {
		case fleetIstio:
			bins[kind] = pilotDiscoveryBinary(b)
		case fleetBulwark:
			bins[kind] = istiodBinary(b)
		default:
			b.Fatalf("FLEET_CONTROL_PLANES: unknown control plane %q", kind)
		}
	}
	return kinds, bins
}

// fleetSize is one size the benchmark runs.
type fleetSize struct{ services, proxies, rounds int }

func fleetSizes() ([]fleetSize, error) {
	rounds, err := envCount("FLEET_ROUNDS", 3)
	if err != nil {
		return nil, err
	}
	if os.Getenv("FLEET_SERVICES") == "" && os.Getenv("FLEET_PROXIES") == "" {
		return []fleetSize{{500, 1000, rounds}, {1000, 200, rounds}}, nil
	}
	services, err := envCount("FLEET_SERVICES", 0)
	if err != nil {
		return nil, err
	}
	proxies, err := envCount("FLEET_PROXIES", 0)
	if err != nil {
		return nil, err
	}
	switch {
	case services < fleetBurstSize+2:
		return nil, fmt.Errorf("FLEET_SERVICES=%d: the burst needs at least %d services", services, fleetBurstSize+2)
	case proxies < fleetSamples || proxies > 2*services:
		return nil, fmt.Errorf("FLEET_PROXIES=%d: between %d and twice FLEET_SERVICES (one per pod)", proxies, fleetSamples)
	}
	return []fleetSize{{services, proxies, rounds}}, nil
}

func envCount(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive number", name, v)
	}
	return n, nil
}

// raiseNoFile lifts the soft limit on open files to the hard one: the
// fleet holds a connection per proxy, and the control planes, started
// afterwards, inherit the limit.
func raiseNoFile(b *testing.B) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
}
