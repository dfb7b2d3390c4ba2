package device

// Verify checks the heap's bookkeeping against its stream heaps (verify.go).
func (h *Heap) Verify() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	return h.verify()
}
