//go:build linux && !race

package fence

import (
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// membarrier(2) commands.
const (
	cmdPrivateExpedited         = 1 << 3
	cmdRegisterPrivateExpedited = 1 << 4
)

// available registers the process for private expedited barriers the first time it is asked
// (Linux 4.14 and later; some sandboxes refuse it), and reports whether that worked.
var available = sync.OnceValue(func() bool {
	defer registered.Store(true)
	return register()
})

// registered is set once available has decided (paid the registration).
var registered atomic.Bool

func decided() bool { return registered.Load() }

func register() bool {
	r, _, errno := syscall.Syscall(unix.SYS_MEMBARRIER, 0, 0, 0) // MEMBARRIER_CMD_QUERY
	if errno != 0 || r&cmdPrivateExpedited == 0 {
		return false
	}
	_, _, errno = syscall.Syscall(unix.SYS_MEMBARRIER, cmdRegisterPrivateExpedited, 0, 0)
	return errno == 0
}

// Heavy makes every running thread of the process execute a full memory barrier before it
// returns. It costs a system call and an interprocessor interrupt to each CPU running one of
// the process's threads (about 1.5 µs on a 2-CPU VM). Call it only when Available.
func Heavy() {
	// Registered, the command cannot fail (the kernel returns EPERM only to unregistered
	// processes), so there is no error to return.
	_, _, _ = syscall.Syscall(unix.SYS_MEMBARRIER, cmdPrivateExpedited, 0, 0)
}
