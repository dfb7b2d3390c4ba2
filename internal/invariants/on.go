//go:build invariants || race

package invariants

// Enabled is true: built with -tags invariants or -race.
const Enabled = true
