//go:build invariants

package heap

// invariants turns on checkInvariants: go test -tags invariants ./heap.
const invariants = true
