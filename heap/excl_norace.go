//go:build !race

package heap

import "github.com/pinmalloc/pinmalloc/internal/fence"

// ownerStore is the owner's store of freeSeq (exclusive.go): a release store, plain on amd64.
func ownerStore(p *uint32, v uint32) { fence.Release(p, v) }

// exclusiveOK reports whether pages may start exclusive: heavy works here.
func exclusiveOK() bool { return fence.Available() }

// heavy makes every running thread of the process run a full barrier.
func heavy() { fence.Heavy() }
