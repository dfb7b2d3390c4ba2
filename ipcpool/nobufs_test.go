package ipcpool

import (
	"fmt"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A release whose write the kernel refuses for want of memory (ENOBUFS: nothing queued, the
// connection sound) is sent again, as one that timed out is: the owner takes the grant back.
// (It was dropped: the owner counted the grant as the process's until the process left.)
func TestReleaseRefusedByKernelSentAgain(t *testing.T) {
	w, path := serveTest(t, Options{})
	// The refused release is tried for the timeout before it is sent again: a second keeps the
	// test short, and leaves the handshake, the grants and the detach time enough on a loaded
	// machine (50 ms failed them there).
	p := attachTest(t, path, AttachOptions{Timeout: time.Second})
	cl := p.cl
	g1, err := cl.grant(1)
	must(t, "grant", err)
	_, err = cl.grant(1) // kept
	must(t, "grant", err)
	cl.mu.Lock()
	c := cl.c
	cl.mu.Unlock()

	// The release is written on a thread whose writes to c fail with ENOBUFS; the thread
	// ends with its goroutine (locked), and the message goes again from another.
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if err := failWrites(c, unix.ENOBUFS); err != nil {
			done <- err
			return
		}
		cl.release(g1, 1)
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Skipf("cannot make the kernel refuse a write here: %v", err)
	}

	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		held := w.heldBy(p.slot)
		w.mu.Unlock()
		if held == 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the owner lends the process %d grants, the process holds 1", held)
		}
	}
}

// failWrites makes write(2) on c's descriptor fail with errno on the calling thread alone (a
// seccomp filter: the thread keeps it for good, so the goroutine must be locked to it and end
// so). It leaves no_new_privs set on the thread, which a filter needs without privilege.
func failWrites(c *net.UnixConn, errno syscall.Errno) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var fd uintptr
	if err := rc.Control(func(d uintptr) { fd = d }); err != nil {
		return err
	}
	// seccomp_data: nr at 0, args[0]'s low word at 16 (little-endian hosts).
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 3, K: unix.SYS_WRITE},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 16},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(fd)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(errno)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	err = unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
	runtime.KeepAlive(prog)
	if err != nil {
		return err
	}
	if _, err := unix.Write(int(fd), nil); err != errno { // (a write of nothing sends nothing)
		return fmt.Errorf("the filter is not in effect: a write says %v", err)
	}
	return nil
}
