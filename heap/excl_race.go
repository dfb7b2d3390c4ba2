//go:build race

package heap

import "sync/atomic"

// ownerStore is the owner's store of freeSeq (exclusive.go). Under the race detector it is a
// sequentially consistent atomic store: the owner's store and load, and the sharer's CAS and
// load, then order each other without a barrier, in a way the detector sees.
func ownerStore(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

// exclusiveOK reports whether pages may start exclusive: always, with ownerStore atomic.
func exclusiveOK() bool { return true }

// heavy is not needed with atomic owner stores.
func heavy() {}
