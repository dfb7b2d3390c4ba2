package fence

// Release stores v at p with release order: every store before it in program order is visible
// to a goroutine that sees v. On amd64 every store is a release store, so it is a plain one.
func Release(p *uint32, v uint32) { *p = v }
