//go:build pinmalloc_probe

package probe

// Enabled is true: built with -tags pinmalloc_probe.
const Enabled = true
