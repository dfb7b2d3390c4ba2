package arena

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// unmapRecorder is a munmapFn that refuses while refuse is set and otherwise unmaps, recording
// each range it is asked to unmap.
type unmapRecorder struct {
	refuse bool
	calls  [][2]uintptr
}

func (u *unmapRecorder) munmap(a, s uintptr) error {
	u.calls = append(u.calls, [2]uintptr{a, s})
	if u.refuse {
		return unix.EBUSY
	}
	return unix.MunmapPtr(mem.Ptr(a), s)
}

// TestHostReserveUnwindRefusedKept: a host Reserve that fails after its mmap (here the
// populate's mlock) and whose munmap of the region is refused keeps the region, and unmaps it
// again at its next Reserve, or at ReleaseKept (Arena.Close), which returns the refusal while
// it lasts. Before, the region stayed mapped for good (with Populate, its memory too): no one
// held it to unmap it again.
func TestHostReserveUnwindRefusedKept(t *testing.T) {
	const size = 64 << 10
	for _, byReserve := range []bool{false, true} {
		h := LockedHost(HostOptions{Populate: true})
		h.mlockFn = func([]byte) error { return unix.EFAULT }
		u := &unmapRecorder{refuse: true}
		h.munmapFn = u.munmap
		if _, err := h.Reserve(size, 1); !errors.Is(err, unix.EFAULT) ||
			!errors.Is(err, unix.EBUSY) {
			t.Fatalf("Reserve: %v, want the populate's failure and the refused munmap", err)
		}
		if len(u.calls) != 1 || u.calls[0][1] != size {
			t.Fatalf("munmaps %#x, want one of %d bytes", u.calls, size)
		}
		kept := u.calls[0]
		if err := h.ReleaseKept(); !errors.Is(err, unix.EBUSY) || !errors.Is(err, ErrCommit) {
			t.Fatalf("ReleaseKept refused: %v, want the refusal", err)
		}
		u.refuse, u.calls = false, nil
		h.mlockFn = nil
		if byReserve {
			r, err := h.Reserve(size, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(u.calls) == 0 || u.calls[0] != kept {
				t.Fatalf("the next Reserve unmapped %#x, want %#x first", u.calls, kept)
			}
			if err := h.Release(r); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := h.ReleaseKept(); err != nil {
				t.Fatalf("ReleaseKept: %v", err)
			}
			if len(u.calls) != 1 || u.calls[0] != kept {
				t.Fatalf("ReleaseKept unmapped %#x, want %#x", u.calls, kept)
			}
		}
		u.calls = nil
		if err := h.ReleaseKept(); err != nil || len(u.calls) != 0 {
			t.Fatalf("ReleaseKept with nothing kept: %v, unmapped %#x", err, u.calls)
		}
	}
}
