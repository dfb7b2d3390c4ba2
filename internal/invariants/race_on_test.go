//go:build race

package invariants

const raceEnabled = true
