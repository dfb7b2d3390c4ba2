//go:build !amd64

package fence

import "sync/atomic"

// Release stores v at p with release order: every store before it in program order is visible
// to a goroutine that sees v (an atomic store: on arm64 a store-release, no full barrier).
func Release(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
