package main

// The GPU check's capabilities (gpucheck.go): what the device and its driver can do, probed by
// the check itself, so that a GPU test that skips saying the device lacks a capability
// (internal/cuda.Lacks) is reported N/A, naming it, only when the check sees the same; a skip
// that claims a capability the device has, or names none, fails.

import (
	"fmt"
	"sort"
	"strings"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// capability is what the check found of one capability.
type capability struct {
	present bool
	detail  string // how it was found
}

// probeCapabilities finds, on dev, each capability a GPU test may skip for want of; n is
// internal/nvml's view of the device (nil: not asked, as on the fake).
func probeCapabilities(dev *icuda.Device, n *nvmlInfo) map[string]capability {
	caps := map[string]capability{}
	attr := func(name string, a int, what string) {
		v, err := dev.Attribute(a)
		detail := fmt.Sprintf("%s: device attribute %d is %d", what, a, v)
		if err != nil {
			detail = fmt.Sprintf("%s: device attribute %d: %v", what, a, err)
		}
		caps[name] = capability{err == nil && v != 0, detail}
	}
	attr(icuda.CapVMM, icuda.AttrVirtualMemoryManagementSupported, "the VMM API")
	attr(icuda.CapManaged, icuda.AttrManagedMemory, "managed memory")
	attr(icuda.CapConcurrentManaged, icuda.AttrConcurrentManagedAccess, "concurrent managed access")
	attr(icuda.CapMemoryPools, icuda.AttrMemoryPoolsSupported, "memory pools")
	if err := dev.MemcpyBatchSupported(); err != nil {
		caps[icuda.CapBatchAPI] = capability{false, err.Error()}
	} else {
		caps[icuda.CapBatchAPI] = capability{true, "cuMemcpyBatchAsync_v2 resolves"}
	}
	for name, loc := range map[string]int32{icuda.CapHostNUMAPools: icuda.LocationHostNUMA, icuda.CapHostPools: icuda.LocationHost} {
		ok, how, err := dev.HostPoolSupport(loc)
		if err != nil {
			how = err.Error()
		}
		caps[name] = capability{ok, how}
	}
	switch {
	case n == nil:
		caps[icuda.CapNVML] = capability{false, "not asked (the fake driver)"}
	case n.Err != "":
		caps[icuda.CapNVML] = capability{false, n.Err}
	default:
		caps[icuda.CapNVML] = capability{true, "NVML describes the device"}
	}
	return caps
}

// lackedBy returns the capability a GPU test's skip names and whether the check saw the device
// lack it: a skip that names none, names one unknown to the check or one the device has, is a
// failure on a GPU.
func (c *check) lackedBy(t testResult) (string, bool, string) {
	name, ok := icuda.LackedCapability(t.Detail)
	if !ok {
		return "", false, "names no capability the device lacks"
	}
	cp, known := c.caps[name]
	switch {
	case !known:
		return name, false, fmt.Sprintf("names capability %q, which the check does not know", name)
	case cp.present:
		return name, false, fmt.Sprintf("says the device lacks %s, but it has it (%s)", name, cp.detail)
	}
	return name, true, cp.detail
}

// capabilityChecks are the report's lines for the capabilities GPU tests found missing, each N/A
// with the tests it left out and what the check saw.
func (c *check) capabilityChecks() []checkResult {
	if c.fake {
		return nil
	}
	tests := map[string][]string{}
	for _, t := range c.Tests {
		if t.Status != skip {
			continue
		}
		if name, lacked, _ := c.lackedBy(t); lacked {
			tests[name] = append(tests[name], t.Binary+" "+t.Name)
		}
	}
	var names []string
	for name := range tests {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []checkResult
	for _, name := range names {
		out = append(out, checkResult{Name: "capability/" + name, Want: "the device and driver have " + name, Status: na, Kind: "run",
			Detail: fmt.Sprintf("the driver lacks it (%s): N/A for %s", c.caps[name].detail, strings.Join(tests[name], ", "))})
	}
	return out
}
