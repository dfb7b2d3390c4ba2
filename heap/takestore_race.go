//go:build race

package heap

import "sync/atomic"

// takeStore is the owner's store of a block's state word as it takes the block (take,
// takeObject). Under the race detector it is atomic: a Block or Hold racing the block's free
// and reuse is its caller's race, which the heap answers (a free block, or the new one), and
// the detector must not report it inside the heap, against their atomic loads of the word.
func takeStore(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
