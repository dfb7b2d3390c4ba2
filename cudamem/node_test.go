package cudamem_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/numa"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// fakeSysfs writes a sysfs with one PCI device's numa_node and returns its root.
func fakeSysfs(t *testing.T, busID string, node int) string {
	t.Helper()
	root := t.TempDir()
	p := filepath.Join(root, "bus/pci/devices", busID, "numa_node")
	must(t, "mkdir", os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, "write", os.WriteFile(p, []byte{byte('0' + node), '\n'}, 0o644))
	return root
}

// TestFakeNUMAPlacement: VMM host memory goes to the node nearest its device, found from the
// driver, else sysfs; with no source it goes to the HOST location; a node the driver refuses
// falls back to HOST when it was the nearest, and is an error when it was asked for. Stats
// and snapshots name the node of every region.
func TestFakeNUMAPlacement(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(3)
	f.SetNUMANodes(2)
	d1 := f.Open(t, 1)
	pub := public(d1)
	restore := cudamem.SetNodeSources(t.TempDir(), func() nvml.Library { return nil })
	defer restore()

	place := func(o cudamem.HostOptions, wantNode int, what string) {
		t.Helper()
		p, err := cudamem.NewHostVMM(pub, o)
		must(t, what+": NewHostVMM", err)
		if p.Node() != wantNode {
			t.Errorf("%s: provider node %d, want %d (location %+v)", what, p.Node(), wantNode, p.Location())
		}
		a := newArena(t, p, 1<<30)
		s, err := a.Alloc(8<<20, 256)
		must(t, what+": Alloc", err)
		if got := f.NodeBytes(wantNode); got != 8<<20 {
			t.Errorf("%s: %d bytes at node %d, want 8 MiB", what, got, wantNode)
		}
		st := a.Stats()
		if st.Node != wantNode || len(st.PerRegion) != 1 || st.PerRegion[0].Node != wantNode || st.PerRegion[0].Committed != 8<<20 {
			t.Errorf("%s: stats node %d, regions %+v", what, st.Node, st.PerRegion)
		}
		if sn := a.Snapshot(); sn.Regions[0].Node != wantNode {
			t.Errorf("%s: snapshot node %d", what, sn.Regions[0].Node)
		}
		must(t, "Free", a.Free(s))
		a.Trim()
	}
	if n, src, ok := cudamem.DeviceNode(pub); !ok || n != 1 || src != cudamem.NodeFromDriver {
		t.Errorf("DeviceNode = %d %q %v; want 1 from the driver", n, src, ok)
	}
	place(cudamem.HostOptions{}, 1, "nearest, from the driver")
	place(cudamem.HostOptions{NUMA: arena.NUMANode(0)}, 0, "asked for node 0")

	// The driver does not say: sysfs does.
	f.SetHostNUMAID(1, -1)
	bus, err := cudamem.PCIBusID(pub)
	must(t, "PCIBusID", err)
	if bus != "0000:11:00.0" {
		t.Errorf("PCI address of device 1 = %q", bus)
	}
	restoreSysfs := cudamem.SetNodeSources(fakeSysfs(t, bus, 0), func() nvml.Library { return nil })
	if n, src, ok := cudamem.DeviceNode(pub); !ok || n != 0 || src != cudamem.NodeFromSysfs {
		t.Errorf("DeviceNode = %d %q %v; want 0 from sysfs", n, src, ok)
	}
	place(cudamem.HostOptions{}, 0, "nearest, from sysfs")
	restoreSysfs()

	// No source knows: the driver places it (HOST).
	if _, _, ok := cudamem.DeviceNode(pub); ok {
		t.Error("DeviceNode found a node with no source")
	}
	place(cudamem.HostOptions{}, arena.NodeUnknown, "no source")
	if f.NodeBytes(-1) != 0 {
		t.Errorf("host location holds %d bytes after Trim", f.NodeBytes(-1))
	}

	// The driver refuses HOST_NUMA: nearest falls back to HOST, a node asked for is an error.
	f.SetHostNUMAID(1, fakecuda.NUMADefault)
	for _, attr := range []bool{true, false} {
		f.RefuseHostNUMA(true, attr)
		place(cudamem.HostOptions{}, arena.NodeUnknown, "HOST_NUMA refused")
		_, err = cudamem.NewHostVMM(pub, cudamem.HostOptions{NUMA: arena.NUMANode(1)})
		if !errors.Is(err, arena.ErrInvalid) || !errors.Is(err, pinmalloc.ErrNotSupported) {
			t.Errorf("node 1 asked while HOST_NUMA is refused (attribute %v) = %v", attr, err)
		}
	}
	f.RefuseHostNUMA(false, false)
	if live := f.LiveObjects(); live["handles"] != 0 {
		t.Errorf("the providers' probes left %v", live)
	}
	var _ = pcuda.LocationHost
}

// TestFakeRegisterNUMA: registered memory is bound to the device's node when the kernel has it,
// to a node asked for, and left unbound when the driver names a node the kernel lacks.
func TestFakeRegisterNUMA(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(false)
	online := numa.Online("/sys")
	for _, c := range []struct {
		what string
		o    cudamem.HostOptions
		id   int // what the driver reports
		want int
	}{
		{"nearest", cudamem.HostOptions{}, online[0], online[0]},
		{"asked", cudamem.HostOptions{NUMA: arena.NUMANode(online[0])}, -1, online[0]},
		{"a node the kernel lacks", cudamem.HostOptions{}, 7, arena.NodeUnknown},
	} {
		f.SetHostNUMAID(0, c.id)
		p, err := cudamem.NewHostRegister(public(d), c.o)
		must(t, c.what+": NewHostRegister", err)
		if p.Node() != c.want {
			t.Errorf("%s: node %d, want %d", c.what, p.Node(), c.want)
		}
		a := newArena(t, p, 1<<30)
		s, err := a.Alloc(8<<20, 256)
		must(t, c.what+": Alloc", err)
		if n, err := numa.NodeOf(s.Base + 5<<20); err != nil || n != online[0] {
			t.Errorf("%s: page on node %d, %v", c.what, n, err)
		}
		if st := a.Stats(); st.Node != c.want || st.PerRegion[0].Node != c.want {
			t.Errorf("%s: stats node %d, regions %+v", c.what, st.Node, st.PerRegion)
		}
		copyBoth(t, d, s.Base, s.Size)
		must(t, "Free", a.Free(s))
	}
	f.SetHostNUMAID(0, fakecuda.NUMADefault)
	if _, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{NUMA: arena.NUMANode(60)}); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("NewHostRegister on node 60 = %v, want ErrInvalid", err)
	}
}
