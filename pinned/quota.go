package pinned

// Quota returns Options.Quota, the cap on the bytes of live buffers the pool was made with (0:
// none), for observers (package metrics exports it as a gauge).
func (p *Pool) Quota() int { return int(p.quota) }
