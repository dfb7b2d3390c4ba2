//go:build !invariants

package invariants

const tagInvariants = false
