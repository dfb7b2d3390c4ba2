package uvm

import (
	"fmt"
	"strings"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// String formats the figures for people, sizes in binary units, one line per group: where the
// blocks are, how Acquire fared, what moved and why, the failures when there are any, and a
// last line when the tier is closed and has given back all it held (Released).
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "uvm tier: policy %s, mover %s, budget %s\n", s.Policy, s.Mover, units.Bytes(s.Budget))
	fmt.Fprintf(&b, "  blocks:   %s, %s: %s on the device (%s acquired), %s on the host, %s fresh\n",
		units.Count(uint64(s.Blocks), "live block"), units.Bytes(s.LiveBytes), units.Bytes(s.DeviceBytes),
		units.Count(uint64(s.AcquiredBlocks), "block"), units.Bytes(s.HostBytes), units.Bytes(s.FreshBytes))
	fmt.Fprintf(&b, "  memory:   %s of host buffers held, %s of spare VRAM; %d allocs, %d frees\n",
		units.Bytes(s.HostHeldBytes), units.Bytes(s.SpareBytes), s.Allocs, s.Frees)
	fmt.Fprintf(&b, "  acquire:  %s, %s (hit rate %.1f%%)\n", units.Count(s.Hits, "hit"), units.Count(s.Misses, "miss", "misses"), 100*s.HitRate())
	in, out := s.Moved(true), s.Moved(false)
	fmt.Fprintf(&b, "  moved:    %s (%s) in, %s (%s) out; %s (%s not copied)\n",
		units.Count(in.Blocks, "block"), units.Bytes(in.Bytes), units.Count(out.Blocks, "block"), units.Bytes(out.Bytes),
		units.Count(s.CleanEvictions, "clean eviction"), units.Bytes(s.CleanBytes))
	for c := range numCauses {
		if i, o := s.In[c], s.Out[c]; i.Blocks+o.Blocks > 0 {
			fmt.Fprintf(&b, "    %-13s %s in, %s out\n", c.String()+":", units.Count(i.Blocks, "block"), units.Count(o.Blocks, "block"))
		}
	}
	fmt.Fprintf(&b, "  pressure: %s, %s, %s answered, %s dropped\n",
		units.Count(s.ThrashEvents, "thrash event"), units.Count(s.ThrashOverrides, "override"),
		units.Count(s.HeapPressure, "heap refusal"), units.Count(s.HostCopiesDropped, "host copy", "host copies"))
	if s.Failures > 0 || s.Pending > 0 {
		fmt.Fprintf(&b, "  batches:  %d failed, %d in flight\n", s.Failures, s.Pending)
	}
	if s.PolicyErrors > 0 {
		fmt.Fprintf(&b, "  policy:   %s yielded that could not be evicted, passed over\n", units.Count(s.PolicyErrors, "block"))
	}
	if s.HeldBackDeviceBytes+s.HeldBackHostBytes > 0 {
		fmt.Fprintf(&b, "  held:     %s of VRAM and %s of host buffers kept out of use after a failed wait\n",
			units.Bytes(s.HeldBackDeviceBytes), units.Bytes(s.HeldBackHostBytes))
	}
	if s.Released {
		b.WriteString("  released: closed, all it held given back\n")
	}
	return b.String()
}
