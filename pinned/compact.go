package pinned

// Compact gives every empty page and segment of the pool's heaps back to the arena, as Trim
// does, but leaves to the purge delay what becomes of their memory: it is decommitted (and
// unlocked) once it has stayed unused for the delay, and a region of a source that lends its
// regions (Options.Source whose arena.Caps has Releases) goes back to the source once it has
// stayed empty for the delay. So a program that calls Compact now and then (package ipcpool's
// processes do, on a timer) returns the memory it stopped using within about a purge delay,
// without Trim's decommit of everything at once. After Close it does nothing.
func (p *Pool) Compact() {
	if p.released.Load() || p.closed.Load() {
		return
	}
	_ = p.reclaim(true)
	p.collectAll()
}
