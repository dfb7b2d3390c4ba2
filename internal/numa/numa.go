// Package numa places memory on host NUMA nodes and finds where devices and pages are: mbind
// and get_mempolicy (golang.org/x/sys/unix has neither wrapper, so they are raw system calls
// here), the node of a PCI device from sysfs, and the nodes the machine has online.
//
// Errors wrap ErrNUMA and the errno, so errors.Is(err, unix.EINVAL) works (a node the machine
// does not have).
package numa

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// ErrNUMA is wrapped by every error of the package.
var ErrNUMA = errors.New("numa")

// Memory policy modes and flags (linux/mempolicy.h).
const (
	mpolPreferred = 1
	mpolBind      = 2
	mpolFNode     = 1 << 0 // get_mempolicy: return the node, not the policy
	mpolFAddr     = 1 << 1 // get_mempolicy: of the page at addr
)

// MaxNodes bounds the nodes of the package: Bind takes, and Online and PCINode return, nodes
// below it (the kernel's MAX_NUMNODES is at most 1024). Others that find a node (NVML) use the
// same bound.
const MaxNodes = 1024

// Bind sets the memory policy of [addr, addr+size), page-aligned and not yet faulted in, to
// node: strict (MPOL_BIND) allocates its pages there or fails the fault (for memory faulted in
// at once, by mlock or a prefault, where the failure is an error and not a signal), otherwise
// (MPOL_PREFERRED) there when the node has memory, elsewhere if not.
func Bind(addr, size uintptr, node int, strict bool) error {
	if node < 0 || node >= MaxNodes {
		return fmt.Errorf("%w: node %d: %w", ErrNUMA, node, unix.EINVAL)
	}
	mask := make([]uint64, MaxNodes/64)
	mask[node/64] = 1 << (node % 64)
	mode := uintptr(mpolPreferred)
	if strict {
		mode = mpolBind
	}
	var pin runtime.Pinner
	pin.Pin(&mask[0])
	defer pin.Unpin()
	_, _, e := unix.Syscall6(unix.SYS_MBIND, addr, size, mode, mem.WordsAddr(mask), MaxNodes+1, 0)
	if e != 0 {
		return fmt.Errorf("%w: mbind of %d bytes to node %d: %w", ErrNUMA, size, node, e)
	}
	return nil
}

// NodeOf returns the node of the page at addr, which must be faulted in.
func NodeOf(addr uintptr) (int, error) {
	out := make([]uint64, 1)
	var pin runtime.Pinner
	pin.Pin(&out[0])
	defer pin.Unpin()
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, mem.WordsAddr(out), 0, 0, addr, mpolFNode|mpolFAddr, 0)
	if e != 0 {
		return -1, fmt.Errorf("%w: get_mempolicy of %#x: %w", ErrNUMA, addr, e)
	}
	return int(int32(out[0])), nil
}

// Online returns the nodes the machine has online (sysfs /sys/devices/system/node/online,
// "0-1,3" style), or [0] where sysfs does not say (a kernel without NUMA) or says something
// else than such a list (a file longer than a sysfs attribute included).
func Online(sysfs string) []int {
	text, ok := readAttr(filepath.Join(sysfs, "devices/system/node/online"))
	if !ok {
		return []int{0}
	}
	nodes, ok := parseNodeList(text)
	if !ok {
		return []int{0}
	}
	return nodes
}

// parseNodeList reads a kernel node list ("0-1,3", ending in a newline or not): ok is false
// unless it is non-empty and its ranges ascend without overlapping, below MaxNodes, so that a
// malformed or hostile file cannot make the list longer than the nodes a kernel can have.
func parseNodeList(s string) (nodes []int, ok bool) {
	prev := -1
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a <= prev || z < a || z >= MaxNodes {
			return nil, false
		}
		for n := a; n <= z; n++ {
			nodes = append(nodes, n)
		}
		prev = z
	}
	return nodes, len(nodes) > 0
}

// PCIBusID formats a PCI address as sysfs names it: "0000:1b:00.0".
func PCIBusID(domain, bus, device int) string {
	return fmt.Sprintf("%04x:%02x:%02x.0", domain, bus, device)
}

// PCINode returns the NUMA node of the PCI device busID ("0000:1b:00.0") from sysfs
// (/sys/bus/pci/devices/BUSID/numa_node). The kernel writes -1 for a device it places on no
// node (a single-node machine): ok is false then, when sysfs has no such device, and when the
// file holds no node a kernel can have (0 to 1023) or is longer than a sysfs attribute. The
// zero address, 0000:00:00.0, is not looked up: it is the host bridge, never a GPU, and what a
// driver's PCI attributes read as when it does not say.
func PCINode(sysfs, busID string) (node int, ok bool) {
	if busID == PCIBusID(0, 0, 0) {
		return -1, false
	}
	text, ok := readAttr(filepath.Join(sysfs, "bus/pci/devices", busID, "numa_node"))
	if !ok {
		return -1, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil || n < 0 || n >= MaxNodes {
		return -1, false
	}
	return n, true
}
