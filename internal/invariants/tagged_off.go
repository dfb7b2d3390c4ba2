//go:build !invariants

package invariants

// tagged: built without -tags invariants (Due samples the checks under -race).
const tagged = false
