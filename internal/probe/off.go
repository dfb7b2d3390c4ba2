//go:build !pinmalloc_probe

package probe

// Enabled is false: built without -tags pinmalloc_probe.
const Enabled = false
