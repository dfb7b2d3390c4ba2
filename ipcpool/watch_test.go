package ipcpool

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A process whose pidfd the owner could not open (out of descriptors) that hangs up and lives
// on keeps its grant until it has exited, as any other: the owner watches it through /proc.
// (It was taken to have exited, and its grant freed while it could still write it.)
func TestUnwatchableProcessMemoryKeptUntilExit(t *testing.T) {
	pidfdOpen = func(int, int) (int, error) { return -1, unix.EMFILE }
	defer func() { pidfdOpen = unix.PidfdOpen }()
	w, path := serveTwoSlots(t)
	k := startChild(t, path, childQuietEnv+"=1")
	k.alloc(t, 100, 9)
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	w.waitRounds(3) // the watcher's rounds
	if ps := w.SharedStats().Pool; ps.Limbo != 1 {
		t.Fatalf("the grant of a live process the owner has no pidfd of: %+v, want it in limbo", ps)
	}
	must(t, "kill", k.cmd.Process.Signal(syscall.SIGKILL))
	_ = k.cmd.Wait()
	k.dead = true
	waitFor(t, func() bool { return w.SharedStats().Pool.Limbo == 0 })
}
