package ipcpool

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// A peer's descriptor that is not sealed yet can change size until it is: checkMemfd must not
// take a size read before the seals as the size of the file it maps. Here the peer (the hook,
// between the two checks) shrinks its memfd to half and seals it then; a check that read the
// size first accepted it, and the mapping of the full size past the file's end is a SIGBUS at
// the first touch, in every process that maps it.
func TestCheckMemfdSizeAfterSeals(t *testing.T) {
	const size = 4 << 20
	fd, err := unix.MemfdCreate("peer", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	must(t, "memfd_create", err)
	defer unix.Close(fd)
	must(t, "ftruncate", unix.Ftruncate(fd, size))
	memfdBetweenChecks = func(int) {
		must(t, "shrink", unix.Ftruncate(fd, size/2))
		_, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
		must(t, "seal", err)
	}
	defer func() { memfdBetweenChecks = nil }()
	if err := checkMemfd(fd, size); !errors.Is(err, ErrProtocol) {
		var st unix.Stat_t
		_ = unix.Fstat(fd, &st)
		t.Fatalf("checkMemfd of a memfd shrunk to %d bytes and sealed as it was checked: %v, "+
			"want ErrProtocol", st.Size, err)
	}
}
