//go:build invariants

package invariants

// tagged: built with -tags invariants, so Due runs every check.
const tagged = true
