package ipcpool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fence"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// The multi-process tests: the test process owns a pool, copies of the test binary
// (re-executed with childEnv set to the socket) attach to it and obey commands on stdin, one
// per line, answering one line each on stdout:
//
//	A n seed          allocate n bytes, fill them with pattern(seed), share: "H <handle>"
//	C <handle> seed   check the handle's bytes against pattern(seed): "OK"
//	K <handle> seed   check the bytes an A of this process gave, not through the handle: "OK"
//	F <handle>        let its allocation go by handle: "OK"
//	B <handle>        map it (Bytes) and free it by address, as the pool's Free: "OK"
//	R <handle>        retain it: "OK";  L <handle>  release it: "OK"
//	N                 the bytes of grants the process holds: "G <bytes>"
//	X                 close the socket without leaving, and live on: "OK"
//	T                 trim its pool (its empty grants go back to the owner): "OK"
//	J                 how many times it rejoined a new owner: "J <n>"
//	W ms              write random words over the control region for ms milliseconds: "OK"
//	Q                 stop and leave (Close): "OK"
//
// and "E stale" or "E <error>" when a command fails. Each child also churns buffers of its
// own on a goroutine (alloc, fill, check, free) all along, unless childQuietEnv is set.
const (
	childEnv      = "PINMALLOC_IPCPOOL_TEST_CHILD"
	childQuietEnv = "PINMALLOC_IPCPOOL_TEST_QUIET"
	// childFirstUseEnv makes the child fail its Attach with "E registers within the handshake"
	// when it connects to the owner before it has paid its membarrier registration.
	childFirstUseEnv = "PINMALLOC_IPCPOOL_TEST_FIRST_USE"
	childDevEnv      = "PINMALLOC_IPCPOOL_TEST_DEVICE"
	// childPauseEnv makes the child say "PAUSED" and stop for good (to be killed) at a point
	// of its work: "ready" (its handshake, the pool mapped, before its ready), "free" (a
	// FreeHandle or Release, its reference let go, before the entry's retirement), "claims"
	// (a rejoin, its claims sent, before the owner's answer).
	childPauseEnv = "PINMALLOC_IPCPOOL_TEST_PAUSE"
)

// stopForGood says "PAUSED" and blocks: a child stopped at a point of its work, to be killed.
func stopForGood() {
	fmt.Println("PAUSED")
	for {
		time.Sleep(time.Hour) // (a timer: the runtime sees no deadlock)
	}
}

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChild(path))
	}
	if path := os.Getenv(ownerChildEnv); path != "" {
		os.Exit(runOwnerChild(path))
	}
	if path := os.Getenv(keeperChildEnv); path != "" {
		os.Exit(runKeeperChild(path))
	}
	os.Exit(m.Run())
}

func pattern(seed uint64, i int) byte { return byte(seed*31 + uint64(i)*7 + uint64(i>>8)) }

func fill(b []byte, seed uint64) {
	for i := range b {
		b[i] = pattern(seed, i)
	}
}

func verify(b []byte, seed uint64) error {
	for i := range b {
		if b[i] != pattern(seed, i) {
			return fmt.Errorf("byte %d of %d is %#x, want %#x", i, len(b), b[i], pattern(seed, i))
		}
	}
	return nil
}

func fmtHandle(h Handle) string {
	return fmt.Sprintf("%d %d %d %d %d", h.Pool, h.Entry, h.Gen, h.Offset, h.Length)
}

func parseHandle(f []string) (Handle, error) {
	if len(f) < 5 {
		return Handle{}, fmt.Errorf("a handle of %d fields", len(f))
	}
	var v [5]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return Handle{}, err
		}
		v[i] = n
	}
	return Handle{Pool: v[0], Entry: uint32(v[1]), Gen: uint32(v[2]), Offset: v[3], Length: v[4]}, nil
}

func errLine(err error) string {
	if errors.Is(err, ErrStaleHandle) {
		return "E stale"
	}
	return "E " + strings.ReplaceAll(err.Error(), "\n", " ")
}

// runChild is a child process: it attaches and obeys its commands.
func runChild(path string) int {
	o := AttachOptions{FallbackPageable: true}
	if os.Getenv(childDevEnv) != "" {
		o.Pool.Backend = pinned.CUDAHost
	}
	if os.Getenv(childFirstUseEnv) != "" {
		dialed = func() {
			if !fence.Decided() {
				fmt.Println("E registers within the handshake")
				os.Exit(1)
			}
		}
	}
	if os.Getenv(childPauseEnv) == "ready" {
		readyPause = stopForGood
	}
	p, err := Attach(context.Background(), path, o)
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	switch os.Getenv(childPauseEnv) {
	case "free":
		p.pauseFree = stopForGood
	case "claims":
		p.cl.pauseRejoin = stopForGood
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	churnErr := make(chan error, 1)
	if os.Getenv(childQuietEnv) == "" {
		wg.Add(1)
		go func() { defer wg.Done(); churn(p, stop, churnErr) }()
	}
	fmt.Println("READY", p.Slot())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		select {
		case err := <-churnErr:
			fmt.Println("E churn:", err)
			return 1
		default:
		}
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "Q" {
			close(stop)
			wg.Wait()
			select {
			case err := <-churnErr:
				fmt.Println("E churn:", err)
				return 1
			default:
			}
			if err := p.Close(); err != nil {
				fmt.Println(errLine(err))
				return 1
			}
			fmt.Println("OK")
			return 0
		}
		fmt.Println(childCommand(p, f))
	}
	return 1
}

// allocated is what this child's A commands allocated, by handle (K checks it).
var allocated = map[Handle][]byte{}

// childCommand runs one command other than Q.
func childCommand(p *Process, f []string) string {
	var h Handle
	if len(f) >= 6 && strings.Contains("CFBRLKD", f[0]) {
		var err error
		if h, err = parseHandle(f[1:6]); err != nil {
			return "E " + err.Error()
		}
	}
	result := func(err error) string {
		if err != nil {
			return errLine(err)
		}
		return "OK"
	}
	switch {
	case len(f) == 3 && f[0] == "A":
		n, _ := strconv.Atoi(f[1])
		seed, _ := strconv.ParseUint(f[2], 10, 64)
		b, err := p.Alloc(n)
		if err != nil {
			return errLine(err)
		}
		fill(b, seed)
		h, err := p.Handle(b)
		if err != nil {
			return errLine(err)
		}
		allocated[h] = b
		return "H " + fmtHandle(h)
	case len(f) == 7 && f[0] == "K": // the bytes an A gave, not through the handle
		seed, _ := strconv.ParseUint(f[6], 10, 64)
		b, ok := allocated[h]
		if !ok {
			return "E no such allocation"
		}
		return result(verify(b, seed))
	case len(f) == 7 && f[0] == "C":
		seed, _ := strconv.ParseUint(f[6], 10, 64)
		b, err := p.Bytes(h)
		if err == nil {
			err = verify(b, seed)
		}
		return result(err)
	case len(f) == 6 && f[0] == "F":
		return result(p.FreeHandle(h))
	case len(f) == 6 && f[0] == "B":
		b, err := p.Bytes(h)
		if err == nil {
			err = p.Free(b)
		}
		return result(err)
	case len(f) == 6 && f[0] == "D": // free by its address the buffer an A gave
		b, ok := allocated[h]
		if !ok {
			return "E no such allocation"
		}
		return result(p.Free(b))
	case len(f) == 1 && f[0] == "V":
		return fmt.Sprintf("V %d", p.Pool.Stats().Live)
	case len(f) == 6 && f[0] == "R":
		return result(p.Retain(h))
	case len(f) == 6 && f[0] == "L":
		return result(p.Release(h))
	case len(f) == 1 && f[0] == "N":
		return fmt.Sprintf("G %d", p.SharedStats().GrantBytes)
	case len(f) == 1 && f[0] == "T":
		return result(p.Pool.Trim())
	case len(f) == 1 && f[0] == "J":
		return fmt.Sprintf("J %d", p.Rejoined())
	case len(f) == 1 && f[0] == "X": // close the socket, stay alive
		p.cl.hangUp()
		return "OK"
	case len(f) == 2 && f[0] == "W":
		ms, _ := strconv.Atoi(f[1])
		scribble(p, time.Duration(ms)*time.Millisecond)
		return "OK"
	}
	return "E bad command " + strings.Join(f, " ")
}

// churn allocates, fills, checks and frees buffers of its own until stop.
func churn(p *Process, stop chan struct{}, errc chan error) {
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	var mine [][]byte
	var seeds []uint64
	for {
		select {
		case <-stop:
			for i, b := range mine {
				if err := verify(b, seeds[i]); err != nil {
					errc <- fmt.Errorf("churn buffer at the end: %w", err)
					return
				}
				_ = p.Free(b)
			}
			return
		default:
		}
		if len(mine) < 32 && r.IntN(2) == 0 {
			b, err := p.Alloc(1 + r.IntN(4096))
			if errors.Is(err, pinmalloc.ErrOutOfMemory) {
				// A pool full for a while (a scribbler's leaks): the churn checks bytes, the
				// tests' models check that memory comes back.
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				errc <- err
				return
			}
			s := r.Uint64()
			fill(b, s)
			mine, seeds = append(mine, b), append(seeds, s)
		} else if len(mine) > 0 {
			i := r.IntN(len(mine))
			if err := verify(mine[i], seeds[i]); err != nil {
				errc <- fmt.Errorf("churn buffer: %w", err)
				return
			}
			if err := p.Free(mine[i]); err != nil {
				errc <- err
				return
			}
			mine[i], seeds[i] = mine[len(mine)-1], seeds[len(seeds)-1]
			mine, seeds = mine[:len(mine)-1], seeds[:len(seeds)-1]
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// scribble writes random words at random places of the control region for d: a peer gone
// wrong. It leaves its own slot's line alone, as a process that still answers fences.
func scribble(p *Process, d time.Duration) {
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	n := len(p.c.w)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 1000 {
			i := r.IntN(n)
			if i < hdrWords {
				continue // the header: a peer that changes the geometry cuts itself off at its next attach only
			}
			var v uint64
			switch r.IntN(4) {
			case 0:
				v = r.Uint64()
			case 1:
				v = uint64(r.IntN(1 << 20))
			case 2:
				v = p.c.load(i) + 1
			default:
				v = p.c.load(r.IntN(n))
			}
			p.c.store(i, v)
		}
		time.Sleep(time.Millisecond)
	}
}

// child is the test's end of a child process.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	slot int
	dead bool
}

func startChild(t *testing.T, path string, env ...string) *child {
	t.Helper()
	c := spawn(t, exec.Command(os.Args[0], "-test.run=^$"), append(append(os.Environ(), childEnv+"="+path), env...))
	line := c.read(t)
	if _, err := fmt.Sscanf(line, "READY %d", &c.slot); err != nil {
		t.Fatalf("child: %q", line)
	}
	return c
}

// spawn starts cmd, the test binary, with environment env, its stdin and stdout piped to the
// test; it is killed at the test's end.
func spawn(t *testing.T, cmd *exec.Cmd, env []string) *child {
	t.Helper()
	cmd.Env = env
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	must(t, "stdin", err)
	out, err := cmd.StdoutPipe()
	must(t, "stdout", err)
	must(t, "start", cmd.Start())
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(c.kill)
	return c
}

func (c *child) kill() {
	if !c.dead {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		c.dead = true
	}
}

func (c *child) read(t *testing.T) string {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("child in slot %d: no answer (%v)", c.slot, c.out.Err())
	}
	return c.out.Text()
}

func (c *child) do(t *testing.T, format string, args ...any) string {
	t.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		t.Fatalf("child in slot %d: %v", c.slot, err)
	}
	return c.read(t)
}

// handle runs an A command and parses its handle.
func (c *child) alloc(t *testing.T, n int, seed uint64) Handle {
	t.Helper()
	line := c.do(t, "A %d %d", n, seed)
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "H" {
		t.Fatalf("child %d: A %d: %q", c.slot, n, line)
	}
	h, err := parseHandle(f[1:])
	must(t, "parse", err)
	return h
}

// quit makes the child leave and waits for it.
func (c *child) quit(t *testing.T) {
	t.Helper()
	if got := c.do(t, "Q"); got != "OK" {
		t.Fatalf("child %d: Q: %s", c.slot, got)
	}
	_ = c.cmd.Wait()
	c.dead = true
}
