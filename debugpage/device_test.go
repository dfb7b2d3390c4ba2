package debugpage

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFakeDevice shows a device heap on the fake driver: its chunks are mapped and its stats
// reported like a pool's.
func TestFakeDevice(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	}()
	small, err := h.Alloc(1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	huge, err := h.Alloc(5<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	dp := New()
	dp.AddDevice("gpu0", h)
	url := serve(t, dp)
	js, _ := get(t, url+"stats.json")
	if !strings.Contains(js, `"name": "gpu0"`) || !strings.Contains(js, `"kind": "device"`) || !strings.Contains(js, `"live": 2`) ||
		!strings.Contains(js, fmt.Sprintf(`"peak_in_use": %d`, 1000+5<<20)) {
		t.Errorf("stats.json:\n%s", js)
	}
	checkSnake(t, js)
	svg, _ := get(t, url+"map.svg")
	if strings.Count(svg, `class="chunk small"`) != 1 || strings.Count(svg, `class="chunk huge"`) != 3 || !strings.Contains(svg, ">gpu0: ") {
		t.Errorf("map.svg: %d small, %d huge chunks", strings.Count(svg, `class="chunk small"`), strings.Count(svg, `class="chunk huge"`))
	}
	if err := h.Free(small); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(huge); err != nil {
		t.Fatal(err)
	}
	dp.Remove("gpu0")
}

// tierScene is a tier of 1 MiB blocks with a 2 MiB budget on the fake driver, sharing a device
// heap, after every block was acquired twice in turn (so most were evicted for pressure, then
// restored for Acquire). The caller frees it with done.
type tierScene struct {
	dev    *cuda.Device
	heap   *device.Heap
	tier   *uvm.Tier
	s      cuda.Stream
	blocks []uvm.Handle
}

func newTierScene(t *testing.T, dev *cuda.Device, blocks int) *tierScene {
	t.Helper()
	ts := &tierScene{dev: dev}
	var err error
	if ts.heap, err = device.New(dev, device.Options{Capacity: 16 << 20, PurgeDelay: -1}); err != nil {
		t.Fatal(err)
	}
	if ts.tier, err = uvm.New(dev, uvm.Options{DeviceBudget: 2 << 20, Heap: ts.heap}); err != nil {
		t.Fatal(err)
	}
	if ts.s, err = dev.StreamCreate(cuda.StreamNonBlocking); err != nil {
		t.Fatal(err)
	}
	for range blocks {
		b, err := ts.tier.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		ts.blocks = append(ts.blocks, b)
	}
	for _, b := range append(ts.blocks, ts.blocks...) {
		if _, err := ts.tier.Acquire(b, ts.s, uvm.Write); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(ts.tier.Release(b, ts.s), dev.StreamSynchronize(ts.s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.tier.Sync(); err != nil {
		t.Fatal(err)
	}
	return ts
}

func (ts *tierScene) done(t *testing.T) {
	for _, b := range ts.blocks {
		if err := ts.tier.Free(b); err != nil {
			t.Error(err)
		}
	}
	if err := errors.Join(ts.tier.ForgetStream(ts.s), ts.tier.Close(), ts.heap.ForgetStream(ts.s), ts.heap.Close(),
		ts.dev.StreamDestroy(ts.s)); err != nil {
		t.Error(err)
	}
}

// TestFakeTier shows a tier: where its blocks are against the budget, what moved and why, its
// Acquire latency, and its timeline of VRAM and evicted bytes; stats.json holds the same.
func TestFakeTier(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	ts := newTierScene(t, dev, 6)
	defer ts.done(t)
	dp := New()
	dp.AddTier("kv", ts.tier)
	dp.AddDevice("vram", ts.heap)
	t0 := time.Now()
	for i := range 3 {
		dp.sampleAll(t0.Add(time.Duration(i) * time.Second))
	}
	url := serve(t, dp)
	page, _ := get(t, url)
	for _, want := range []string{"<h2>kv (uvm)</h2>", "Policy lru", `class="tier"`, "VRAM budget", "<td>2 MiB</td>",
		"evicted: only in pinned host memory", "<td>to the host</td><td>pressure</td>", "<td>to the device</td><td>acquire</td>",
		"in VRAM: 2 MiB", "evicted to the host: 4 MiB", "<h2>vram (device)</h2>",
		"<th>p50</th><th>p99</th>", "<td>Acquire, restored</td><td>12</td>"} { // every Acquire of the scene restores

		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	js, _ := get(t, url+"stats.json")
	checkSnake(t, js)
	if !strings.Contains(js, `"kind": "uvm"`) || !strings.Contains(js, `"cause": "pressure"`) || !strings.Contains(js, `"evicted": 4194304`) ||
		!strings.Contains(js, `"outcome": "miss"`) || !strings.Contains(js, `"p99_ns"`) {
		t.Errorf("stats.json lacks the tier:\n%.3000s", js)
	}
	if svg, _ := get(t, url+"map.svg"); !strings.Contains(svg, ">vram: ") || strings.Contains(svg, ">kv: ") {
		t.Error("map.svg should draw the heap's map and none for the tier")
	}
}

// TestFakeDeferredByStream: blocks of a device heap freed on two held streams show in a table
// of the streams holding them, on the page and in stats.json; once the streams have passed
// the frees, the table goes.
func TestFakeDeferredByStream(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var streams [2]cuda.Stream
	for i := range streams {
		if streams[i], err = dev.StreamCreate(cuda.StreamNonBlocking); err != nil {
			t.Fatal(err)
		}
	}
	fake.Hold(true)
	for i, n := range []int{4096, 8192, 1 << 20} {
		p, err := h.Alloc(n, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The freeing stream uses the block: its free waits for that work.
		if err := h.MemsetAsync(p, 0, n, streams[min(i, 1)]); err != nil {
			t.Fatal(err)
		}
		if err := h.FreeAsync(p, streams[min(i, 1)]); err != nil {
			t.Fatal(err)
		}
	}
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.FreeAsync(b, streams[0]); err != nil {
		t.Fatal(err)
	}
	dp := New()
	dp.AddDevice("gpu0", h)
	dp.AddPool("host", pool)
	url := serve(t, dp)
	page, _ := get(t, url)
	for _, want := range []string{
		`<table class="streams">`,
		fmt.Sprintf("<tr><td>%#x</td><td>1</td><td>64 KiB</td></tr>", streams[0]),
		fmt.Sprintf("<tr><td>%#x</td><td>1</td><td>4 KiB</td></tr>", streams[0]),
		fmt.Sprintf("<tr><td>%#x</td><td>2</td><td>1.01 MiB</td></tr>", streams[1]),
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	js, _ := get(t, url+"stats.json")
	if want := fmt.Sprintf(`"stream": %d,
          "buffers": 2,
          "bytes": %d`, streams[1], 8192+1<<20); !strings.Contains(js, `"deferred_by_stream"`) || !strings.Contains(js, want) {
		t.Errorf("stats.json lacks the streams (%q):\n%s", want, js)
	}
	fake.Hold(false)
	fake.Complete()
	if page, _ := get(t, url); strings.Contains(page, `class="streams"`) {
		t.Errorf("the streams passed their frees, and the table stays")
	}
	dp.Remove("gpu0")
	dp.Remove("host")
	if err := pool.Close(); err != nil {
		t.Error(err)
	}
	for _, s := range streams {
		if err := errors.Join(h.ForgetStream(s), dev.StreamDestroy(s)); err != nil {
			t.Error(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Error(err)
	}
}
