package main

// The GPU check's cross-check of internal/nvml against nvidia-smi (issue 26): the name, the
// total memory and the PCI bus id NVML gives for the device, beside what nvidia-smi prints.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// nvmlInfo is what internal/nvml says of the device the check measures.
type nvmlInfo struct {
	Name     string `json:"name"`
	TotalMem uint64 `json:"total_mem"`
	PCIBusID string `json:"pci_bus_id"`
	Err      string `json:"error,omitempty"`
}

// describeNVML asks internal/nvml for the GPU of the given name (the first of that name; the
// check measures device 0).
func describeNVML(name string) *nvmlInfo {
	gpus, err := nvml.Discover(nvml.Default())
	if err != nil {
		return &nvmlInfo{Err: err.Error()}
	}
	for _, g := range gpus {
		if g.Name == name {
			return &nvmlInfo{Name: g.Name, TotalMem: g.TotalMem, PCIBusID: g.PCIBusID}
		}
	}
	if len(gpus) > 0 {
		g := gpus[0]
		return &nvmlInfo{Name: g.Name, TotalMem: g.TotalMem, PCIBusID: g.PCIBusID}
	}
	return &nvmlInfo{Err: "NVML lists no GPU"}
}

// normBusID writes a PCI address one way: lower case, a 4-digit domain ("00000000:1B:00.0"
// from nvidia-smi and NVML, "0000:1b:00.0" from sysfs, are both 0000:1b:00.0).
func normBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.IndexByte(s, ':'); i > 4 {
		s = s[i-4:]
	}
	return s
}

// compareNVML compares NVML's view of the device with nvidia-smi's line (name, driver
// version, memory.total, pci.bus_id, as gpucheck asks for them): the names equal, the memory
// within 1 MiB (nvidia-smi prints MiB), the bus ids the same address.
func compareNVML(smi string, n *nvmlInfo) (ok bool, detail string) {
	if n == nil || n.Err != "" {
		return false, "internal/nvml: " + map[bool]string{true: "not asked", false: n.Err}[n == nil]
	}
	f := strings.Split(smi, ",")
	if len(f) != 4 {
		return false, fmt.Sprintf("nvidia-smi printed %q, want name, driver, memory, bus id", smi)
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	var bad []string
	if f[0] != n.Name {
		bad = append(bad, fmt.Sprintf("name: nvml %q, nvidia-smi %q", n.Name, f[0]))
	}
	mib, err := strconv.ParseUint(strings.TrimSuffix(f[2], " MiB"), 10, 64)
	if err != nil || (n.TotalMem>>20 != mib && (n.TotalMem+(1<<20)-1)>>20 != mib) {
		bad = append(bad, fmt.Sprintf("memory: nvml %d MiB, nvidia-smi %q", n.TotalMem>>20, f[2]))
	}
	if normBusID(f[3]) != normBusID(n.PCIBusID) {
		bad = append(bad, fmt.Sprintf("PCI bus id: nvml %q, nvidia-smi %q", n.PCIBusID, f[3]))
	}
	same := fmt.Sprintf("nvml: %s, %d MiB, %s; nvidia-smi: %s, %s, %s", n.Name, n.TotalMem>>20, n.PCIBusID, f[0], f[2], f[3])
	if len(bad) > 0 {
		return false, strings.Join(bad, "; ") + " (" + same + ")"
	}
	return true, "the same: " + same
}
