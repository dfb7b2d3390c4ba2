package device

import (
	"errors"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeCopyBounds: a copy or memset must lie inside one live block of the heap. It once
// wrote 512 bytes into a 256-byte block (over its neighbour), and into a freed block, and
// returned nil.
func TestFakeCopyBounds(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	host, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	must(t, "mmap", err)
	defer unix.Munmap(host)
	small := alloc(t, h, 256, s)
	next := alloc(t, h, 256, s) // the neighbour an overrun would overwrite
	big := alloc(t, h, 3<<20, s)
	freed := alloc(t, h, 256, s)
	must(t, "Free", h.Free(pcuda.DevicePtr(freed)))
	foreign, err := dev.MemAlloc(4096)
	must(t, "cuMemAlloc", err)
	defer dev.MemFree(foreign)

	// Inside one block, at its start or at an offset: allowed.
	must(t, "HtoD 256 into 256", h.HtoD(pcuda.DevicePtr(small), host[:256]))
	must(t, "HtoD at an offset", h.HtoD(pcuda.DevicePtr(small+128), host[:128]))
	must(t, "DtoH at an offset", h.DtoH(host[:100], pcuda.DevicePtr(big+(3<<20)-100)))
	must(t, "MemsetAsync at an offset", h.MemsetAsync(pcuda.DevicePtr(big+1), 7, 3<<20-1, pcuda.Stream(s)))
	must(t, "DtoDAsync", h.DtoDAsync(pcuda.DevicePtr(next), pcuda.DevicePtr(small), 256, pcuda.Stream(s)))

	type call struct {
		name string
		err  error
	}
	for want, calls := range map[error][]call{
		ErrOutOfBounds: {
			{"HtoD 512 into 256", h.HtoD(pcuda.DevicePtr(small), host[:512])},
			{"HtoD 129 at offset 128", h.HtoD(pcuda.DevicePtr(small+128), host[:129])},
			{"DtoH 512 from 256", h.DtoH(host[:512], pcuda.DevicePtr(small))},
			{"DtoD into 256 from big", h.DtoD(pcuda.DevicePtr(small), pcuda.DevicePtr(big), 512)},
			{"DtoD from 256 into big", h.DtoD(pcuda.DevicePtr(big), pcuda.DevicePtr(small), 512)},
			{"HtoDAsync 257", h.HtoDAsync(pcuda.DevicePtr(small), host[:257], pcuda.Stream(s))},
			{"DtoHAsync 300", h.DtoHAsync(host[:300], pcuda.DevicePtr(next), pcuda.Stream(s))},
			{"DtoDAsync 4096", h.DtoDAsync(pcuda.DevicePtr(big), pcuda.DevicePtr(small), 4096, pcuda.Stream(s))},
			{"MemsetAsync past the end", h.MemsetAsync(pcuda.DevicePtr(big+4096), 0, 3<<20, pcuda.Stream(s))},
		},
		ErrNotOwned: {
			{"HtoD into a freed block", h.HtoD(pcuda.DevicePtr(freed), host[:16])},
			{"DtoH from a freed block", h.DtoH(host[:16], pcuda.DevicePtr(freed))},
			{"MemsetAsync of a freed block", h.MemsetAsync(pcuda.DevicePtr(freed), 0, 16, pcuda.Stream(s))},
			{"HtoD into foreign memory", h.HtoD(pcuda.DevicePtr(foreign), host[:16])},
			{"DtoD from foreign memory", h.DtoD(pcuda.DevicePtr(small), pcuda.DevicePtr(foreign), 16)},
			{"HtoD into a block never allocated", h.HtoD(pcuda.DevicePtr(small+4096), host[:16])},
		},
	} {
		for _, c := range calls {
			if !errors.Is(c.err, want) {
				t.Errorf("%s: %v, want %v", c.name, c.err, want)
			}
		}
	}
	if err := h.HtoD(pcuda.DevicePtr(small), host[:512]); err != nil {
		t.Log(err)
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	for _, p := range []cuda.DevicePtr{small, next, big} {
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	}
	must(t, "Close", h.Close())
	for _, err := range []error{
		h.HtoD(pcuda.DevicePtr(small), host[:16]), h.DtoH(host[:16], pcuda.DevicePtr(small)), h.DtoD(pcuda.DevicePtr(small), pcuda.DevicePtr(next), 16),
		h.HtoDAsync(pcuda.DevicePtr(small), host[:16], pcuda.Stream(s)), h.DtoHAsync(host[:16], pcuda.DevicePtr(small), pcuda.Stream(s)),
		h.DtoDAsync(pcuda.DevicePtr(small), pcuda.DevicePtr(next), 16, pcuda.Stream(s)), h.MemsetAsync(pcuda.DevicePtr(small), 0, 16, pcuda.Stream(s)),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("copy after Close: %v", err)
		}
	}
}
