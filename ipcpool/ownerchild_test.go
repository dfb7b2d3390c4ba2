package ipcpool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// ownerChildEnv makes the test binary the owner of a pool at the path it names (its size in
// ownerSizeEnv, 8 MiB by default), answering on stdout "READY" and then, for each line on
// stdin, the commands of a child (child_test.go) but Q and X, and the owner's own: "SETTLED"
// (waitSettled) and "ROUNDS n" (waitRounds), each answered "OK"; it lives until killed or its
// stdin closes.
const (
	ownerChildEnv = "PINMALLOC_IPCPOOL_TEST_OWNER"
	ownerSizeEnv  = "PINMALLOC_IPCPOOL_TEST_OWNER_SIZE"
	ownerOpenEnv  = "PINMALLOC_IPCPOOL_TEST_OWNER_OPEN"  // any user may connect; root may attach
	ownerAdoptEnv = "PINMALLOC_IPCPOOL_TEST_OWNER_ADOPT" // adopt the pool of an owner that died
	ownerColdEnv  = "PINMALLOC_IPCPOOL_TEST_OWNER_COLD"  // time Serve in a process that never used pinmalloc
	ownerPauseEnv = "PINMALLOC_IPCPOOL_TEST_OWNER_PAUSE" // say "PAUSED" before replacing a stale socket, go on at a line on stdin
)

func runOwnerChild(path string) int {
	size := 8 << 20
	if s := os.Getenv(ownerSizeEnv); s != "" {
		size, _ = strconv.Atoi(s)
	}
	o := Options{Size: size, GrantSize: 2 << 20, FallbackPageable: true, Slots: 8}
	if os.Getenv(ownerOpenEnv) != "" {
		o.Mode, o.AllowUIDs = 0o666, []int{0}
	}
	if os.Getenv(ownerAdoptEnv) != "" {
		o.Adopt, o.Timeout = 5*time.Second, 300*time.Millisecond
	}
	if os.Getenv(ownerColdEnv) == "" {
		// What any program that uses pinmalloc paid once before it serves (the process's
		// membarrier registration, a kernel RCU grace period): not the restart's.
		if p, err := pinned.New(pinned.Options{Capacity: 2 << 20, Backend: pinned.Pageable}); err == nil {
			_ = p.Close()
		}
	}
	if os.Getenv(ownerPauseEnv) != "" {
		listenPause = func() {
			fmt.Println("PAUSED")
			var b [1]byte
			for b[0] != '\n' { // byte by byte: the lines after are the commands'
				if n, _ := os.Stdin.Read(b[:]); n == 0 {
					return
				}
			}
		}
	}
	var before, after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &before)
	start := time.Now()
	w, err := Serve(path, o)
	took := time.Since(start)
	_ = unix.Getrusage(unix.RUSAGE_SELF, &after)
	if errors.Is(err, ErrServed) {
		fmt.Println("E served:", err)
		return 1
	}
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	fmt.Println("READY", w.hello.pool, took.Nanoseconds(), after.Minflt-before.Minflt)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 1 && f[0] == "SETTLED":
			w.waitSettled()
			fmt.Println("OK")
		case len(f) == 2 && f[0] == "ROUNDS":
			n, _ := strconv.Atoi(f[1])
			w.waitRounds(n)
			fmt.Println("OK")
		case len(f) > 0:
			fmt.Println(childCommand(w.Process, f))
		}
	}
	return 0
}

// ownerChild is the test's end of an owner child.
type ownerChild struct {
	*child
	pool uint64
}

func startOwnerChild(t *testing.T, path string, size int, env ...string) *ownerChild {
	t.Helper()
	return startProc(t, exec.Command(os.Args[0], "-test.run=^$"), ownerEnv(path, size, env...))
}

// ownerEnv is the environment of an owner child.
func ownerEnv(path string, size int, env ...string) []string {
	return append(append(os.Environ(), ownerChildEnv+"="+path, ownerSizeEnv+"="+strconv.Itoa(size)), env...)
}

// startProc starts cmd, the test binary, with environment env, and waits for its READY.
func startProc(t *testing.T, cmd *exec.Cmd, env []string) *ownerChild {
	t.Helper()
	o := &ownerChild{child: spawn(t, cmd, env)}
	done := make(chan string, 1)
	go func() {
		if o.out.Scan() {
			done <- o.out.Text()
		}
		close(done)
	}()
	select {
	case line := <-done:
		if _, err := fmt.Sscanf(line, "READY %d", &o.pool); err != nil {
			t.Fatalf("owner child: %q", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the owner child did not start")
	}
	return o
}

// keeperChildEnv makes the test binary a keeper of the pool at the path it names: it prints
// "READY" and keeps the pool until its stdin closes or it is killed.
const keeperChildEnv = "PINMALLOC_IPCPOOL_TEST_KEEPER"

func runKeeperChild(path string) int {
	k, err := Keep(context.Background(), path, AttachOptions{FallbackPageable: true})
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	fmt.Println("READY", k.ID())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println("R", k.Rejoined())
	}
	return 0
}

// startKeeperChild starts a keeper child of the pool at path.
func startKeeperChild(t *testing.T, path string) *ownerChild {
	t.Helper()
	return startProc(t, exec.Command(os.Args[0], "-test.run=^$"), append(os.Environ(), keeperChildEnv+"="+path))
}

// waitRounds waits until the owner's watcher has done n whole rounds from now: whatever a
// round does with what was done before the call (a release, a process's exit), it has done.
func (w *Owner) waitRounds(n int) {
	end := w.rounds.Load() + uint64(n) + 1 // (the round under way may have begun before)
	for w.rounds.Load() < end {
		time.Sleep(time.Millisecond) // polling a condition: the next round
	}
}

// waitSettled waits until an owner that adopted a pool has settled it: its scan of what the
// previous owner left is done, its wait for the rejoins is over (those that did not come given
// up) and no grant is held back for a claim, and then for a whole round more.
func (w *Owner) waitSettled() {
	for {
		w.mu.Lock()
		settled := w.scan == nil && w.rejoinBy.IsZero() && w.unclaimed == nil
		w.mu.Unlock()
		if settled {
			w.waitRounds(1)
			return
		}
		time.Sleep(time.Millisecond) // polling a condition: the owner's rounds settle it
	}
}
