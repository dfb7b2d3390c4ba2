package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// oddPolicy is LRU under a name that is not valid UTF-8, as a program's own Policy may have.
type oddPolicy struct{ uvm.Policy }

func (oddPolicy) Name() string { return "lru\xff" }

// TestInfoLabelsMadeValid: a label value the source describes itself with (a Policy's, a
// Provider's name) is the program's text, which the Add methods do not see: one that is not
// valid UTF-8 is exported with U+FFFD in place of the bad bytes. It was an invalid metric,
// which made Gather fail and promhttp answer the whole scrape, every other family of the
// registry included, with an error.
func TestInfoLabelsMadeValid(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 16 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 2 << 20, Heap: h,
		Policy: oddPolicy{uvm.LRU()}})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	c := New()
	if err := c.AddTier("kv", tier); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather with a policy named %q: %v", "lru\xff", err)
	}
	var policy string
	for _, f := range families {
		if f.GetName() != "pinmalloc_uvm_tier_info" {
			continue
		}
		for _, l := range f.GetMetric()[0].GetLabel() {
			if l.GetName() == "policy" {
				policy = l.GetValue()
			}
		}
	}
	if policy != "lru\uFFFD" {
		t.Errorf("policy label %q; want %q", policy, "lru\uFFFD")
	}
}
