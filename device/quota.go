package device

// Quota returns Options.Quota, the cap on the bytes of live blocks the heap was made with (0:
// none), for observers (package metrics exports it as a gauge).
func (h *Heap) Quota() int { return int(h.quota) }
