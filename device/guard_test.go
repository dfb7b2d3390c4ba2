package device

import (
	"bytes"
	"errors"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeZeroOnFree: a block freed on its own stream (reused at once), on another stream
// (reused after the event) or synchronously reads zero when it is handed out again.
func TestFakeZeroOnFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, ZeroOnFree: true})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	host, err := unix.Mmap(-1, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	must(t, "mmap", err)
	defer unix.Munmap(host)
	secret := bytes.Repeat([]byte{0x5A}, 4096)
	for _, how := range []string{"FreeAsync same stream", "FreeAsync other stream", "Free"} {
		p := alloc(t, h, 4096, a)
		must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), secret))
		switch how {
		case "FreeAsync same stream":
			must(t, how, h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
		case "FreeAsync other stream":
			must(t, how, h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
			must(t, "Sync", h.Sync())
		case "Free":
			must(t, how, h.Free(pcuda.DevicePtr(p)))
		}
		q := alloc(t, h, 4096, a)
		if q != p {
			t.Fatalf("%s: block not reused (%#x, then %#x): the test proves nothing", how, p, q)
		}
		must(t, "StreamSynchronize", dev.StreamSynchronize(a))
		got := host[:4096]
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
		if !bytes.Equal(got, make([]byte, 4096)) {
			t.Fatalf("%s: the next user of the block reads the last one's data", how)
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
	}
}

func TestFakeQuota(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, Quota: 1 << 20})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	p := alloc(t, h, 768<<10, s)
	if _, err := h.Alloc(512<<10, pcuda.Stream(s)); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc past the quota: %v", err)
	}
	q := alloc(t, h, 256<<10, s) // exactly the quota
	if _, err := h.Alloc(1, pcuda.Stream(s)); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc at the quota: %v", err)
	}
	f.Hold(true)
	// The default stream uses p, then frees it: deferred, it counts until done.
	must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0, 768<<10, 0))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), 0))
	if _, err := h.Alloc(512<<10, pcuda.Stream(s)); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc with a deferred free pending: %v", err)
	}
	f.Complete()
	f.Hold(false)
	must(t, "Sync", h.Sync())
	r := alloc(t, h, 512<<10, s)
	freeAll(t, h, []cuda.DevicePtr{q, r})
}
