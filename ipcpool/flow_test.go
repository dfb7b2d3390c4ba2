package ipcpool

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// A process that frees everything gives its grants back within the hysteresis (its pool's
// compaction, then the purge delay), and another process can then allocate them: memory
// follows the live set. (A process used to keep its grants while attached: after one freed
// 24 MiB, another could not get 1.5 MiB.)
func TestMemoryFollowsLiveSet(t *testing.T) {
	w, path := serveTest(t, Options{Size: 32 << 20, GrantSize: 2 << 20})
	a := attachTest(t, path, AttachOptions{})
	b := attachTest(t, path, AttachOptions{})
	var bufs [][]byte
	for range 24 {
		x, err := a.Alloc(1 << 20)
		must(t, "Alloc", err)
		bufs = append(bufs, x)
	}
	if g := a.SharedStats().GrantBytes; g < 24<<20 {
		t.Fatalf("a holds %d bytes of grants for 24 MiB", g)
	}
	for _, x := range bufs {
		must(t, "Free", a.Free(x))
	}
	start := time.Now()
	waitFor(t, func() bool { return a.SharedStats().GrantBytes == 0 })
	d := time.Since(start)
	t.Logf("24 MiB back to the pool %v after the last free", d)
	if limit := compactEvery + 2*arenaPurgeDelay + 200*time.Millisecond; d > limit {
		t.Fatalf("the grants came back after %v, beyond the hysteresis (%v)", d, limit)
	}
	// b takes them: 30 MiB of the 32.
	var got [][]byte
	for range 15 {
		x, err := b.Alloc(1<<21 - 4096)
		must(t, "b Alloc", err)
		got = append(got, x)
	}
	for _, x := range got {
		must(t, "Free", b.Free(x))
	}
	_ = w
}

// arenaPurgeDelay is the pinned pools' default purge delay.
const arenaPurgeDelay = 10 * time.Millisecond

// When a process needs memory that another holds empty (its purge delay keeps it), the owner
// asks that process for its empty grants, and the request is served at once rather than
// failing or waiting for the delay.
func TestOwnerAsksForEmptyGrants(t *testing.T) {
	_, path := serveTest(t, Options{Size: 8 << 20, GrantSize: 2 << 20})
	lazy := attachTest(t, path, AttachOptions{Pool: pinned.Options{PurgeDelay: time.Hour}})
	b := attachTest(t, path, AttachOptions{})
	var bufs [][]byte
	for range 3 {
		x, err := lazy.Alloc(1<<21 - 4096)
		must(t, "Alloc", err)
		bufs = append(bufs, x)
	}
	for _, x := range bufs {
		must(t, "Free", lazy.Free(x))
	}
	start := time.Now()
	for range 3 { // one grant is free, the other three are lazy's
		x, err := b.Alloc(1<<21 - 4096)
		must(t, "b Alloc of memory another process holds empty", err)
		defer b.Free(x)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the request waited %v for the empty grants", d)
	}
	if st := lazy.SharedStats(); st.Trims == 0 {
		t.Fatal("the lazy process was never asked")
	}
}

// After a process dies holding most of the pool, an Alloc that needs its memory waits for it
// to come back (the process to exit, the fence to pass) rather than failing with the pool
// full of nothing: 3 runs of 5 failed so at the default drain interval.
func TestDeadProcessMemoryWaitedFor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 16 << 20, GrantSize: 2 << 20, FallbackPageable: true})
	must(t, "Serve", err)
	defer w.Close()
	runs := 5
	if long() {
		runs = 50
	}
	for run := range runs {
		k := startChild(t, path, childQuietEnv+"=1")
		var hs []Handle
		for range 6 {
			hs = append(hs, k.alloc(t, 1<<21-4096, uint64(run)))
		}
		must(t, "kill", k.cmd.Process.Signal(syscall.SIGKILL))
		_ = k.cmd.Wait()
		k.dead = true
		var bufs [][]byte
		for range 6 { // at once: the memory is the dead process's
			x, err := w.Alloc(1<<21 - 4096)
			if err != nil {
				t.Fatalf("run %d: an Alloc of a dead process's memory: %v", run, err)
			}
			bufs = append(bufs, x)
		}
		for _, x := range bufs {
			must(t, "Free", w.Free(x))
		}
		for _, h := range hs {
			if _, err := w.Bytes(h); err == nil {
				t.Fatalf("run %d: a handle of the dead process reads", run)
			}
		}
	}
}
