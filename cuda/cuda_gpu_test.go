package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCUDAPublicSurface runs the public surface on a real GPU (it skips without a driver): the
// device's figures, a priority stream ordered after another through an event, and nothing left
// behind (fakecuda.GPU checks the device's counters at cleanup).
func TestCUDAPublicSurface(t *testing.T) {
	d := icuda.Wrap[*cuda.Device](fakecuda.GPU(t, 0))
	name, err := d.Name()
	must(t, "Name", err)
	total, err := d.TotalMem()
	must(t, "TotalMem", err)
	free, total2, err := d.MemInfo()
	must(t, "MemInfo", err)
	if name == "" || total == 0 || total2 != total || free > total {
		t.Errorf("name %q, total %d, MemInfo %d of %d", name, total, free, total2)
	}
	v, err := cuda.DriverVersion()
	must(t, "DriverVersion", err)
	t.Logf("%s, %d MiB (%d free), driver CUDA %d.%d", name, total>>20, free>>20, v/1000, v%1000/10)

	least, greatest, err := d.StreamPriorityRange()
	must(t, "StreamPriorityRange", err)
	if greatest > least {
		t.Errorf("priority range least %d, greatest %d: greatest must be numerically lower", least, greatest)
	}
	a, err := d.StreamCreate(cuda.StreamNonBlocking)
	must(t, "StreamCreate", err)
	b, err := d.StreamCreateWithPriority(cuda.StreamNonBlocking, greatest)
	must(t, "StreamCreateWithPriority", err)
	ev, err := d.EventCreate()
	must(t, "EventCreate", err)
	must(t, "EventRecord", d.EventRecord(ev, a))
	must(t, "StreamWaitEvent", d.StreamWaitEvent(b, ev))
	must(t, "StreamSynchronize", d.StreamSynchronize(b))
	must(t, "EventQuery", d.EventQuery(ev))
	must(t, "EventDestroy", d.EventDestroy(ev))
	must(t, "StreamDestroy", d.StreamDestroy(a))
	must(t, "StreamDestroy", d.StreamDestroy(b))
}
