//go:build !invariants && !race

package invariants

// Enabled is false: built without -tags invariants and without -race.
const Enabled = false
