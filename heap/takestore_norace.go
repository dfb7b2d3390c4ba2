//go:build !race

package heap

// takeStore is the owner's store of a block's state word as it takes the block: a plain
// store, which the compiler inlines to the one it was (see takestore_race.go).
func takeStore(p *uint32, v uint32) { *p = v }
