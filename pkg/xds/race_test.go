//go:build race

package xds

// raceEnabled scales hostile tests down under the race detector.
const raceEnabled = true
