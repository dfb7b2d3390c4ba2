package shared

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// The multi-process test: the test process owns a pool, two copies of the test binary
// (re-executed with childEnv set) attach to it and obey commands on stdin, one per line,
// answering one line each on stdout:
//
//	A n seed          allocate n bytes, fill them with pattern(seed): "H <handle>"
//	C <handle> seed   check the handle's bytes against pattern(seed): "OK"
//	F <handle>        free by handle: "OK"
//	X                 close the socket without detaching, and live on: "OK"
//	Q                 stop, detach: "OK"
//
// and "E stale" or "E <error>" when a command fails. Each child also churns buffers of its
// own on a goroutine (alloc, fill, check, free) all along.
const childEnv = "PINMALLOC_SHARED_TEST_CHILD"

// childDeviceEnv, set, makes a child attach with CUDA device 0.
const childDeviceEnv = "PINMALLOC_SHARED_TEST_DEVICE"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChild(path))
	}
	if path := os.Getenv(ownerChildEnv); path != "" {
		os.Exit(runOwnerChild(path))
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
	return fmt.Sprintf("%d %d %d %d %d", h.Pool, h.Region, h.Gen, h.Offset, h.Length)
}

func parseHandle(f []string) (Handle, error) {
	var v [5]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return Handle{}, err
		}
		v[i] = n
	}
	return Handle{Pool: v[0], Region: uint32(v[1]), Gen: uint32(v[2]), Offset: v[3], Length: v[4]}, nil
}

func errLine(err error) string {
	if errors.Is(err, ErrStaleHandle) {
		return "E stale"
	}
	return "E " + strings.ReplaceAll(err.Error(), "\n", " ")
}

// runChild is a child process: it attaches and obeys its commands.
func runChild(path string) int {
	// Under an 8 MiB memlock limit the children run pageable. With childDeviceEnv they attach
	// with CUDA device 0 (the fake's, in the tests).
	o := AttachOptions{FallbackPageable: true}
	if os.Getenv(childDeviceEnv) != "" {
		dev, err := pcuda.Open(0)
		if err != nil {
			fmt.Println("E", err)
			return 1
		}
		o.Device = dev
	}
	p, err := Attach(path, o)
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	churnErr := make(chan error, 1)
	wg.Add(1)
	go func() { // local churn beside the commands
		defer wg.Done()
		r := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
		var mine [][]byte
		var seeds []uint64
		for {
			select {
			case <-stop:
				for _, b := range mine {
					_ = p.Free(b)
				}
				return
			default:
			}
			if len(mine) < 32 && r.IntN(2) == 0 {
				b, err := p.Alloc(1 + r.IntN(4096))
				if err != nil {
					churnErr <- err
					return
				}
				s := r.Uint64()
				fill(b, s)
				mine, seeds = append(mine, b), append(seeds, s)
			} else if len(mine) > 0 {
				i := r.IntN(len(mine))
				if err := verify(mine[i], seeds[i]); err != nil {
					churnErr <- fmt.Errorf("churn buffer: %w", err)
					return
				}
				if err := p.Free(mine[i]); err != nil {
					churnErr <- err
					return
				}
				mine[i], seeds[i] = mine[len(mine)-1], seeds[len(seeds)-1]
				mine, seeds = mine[:len(mine)-1], seeds[:len(seeds)-1]
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()
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
		switch {
		case len(f) == 3 && f[0] == "A":
			n, _ := strconv.Atoi(f[1])
			seed, _ := strconv.ParseUint(f[2], 10, 64)
			b, err := p.Alloc(n)
			if err != nil {
				fmt.Println(errLine(err))
				continue
			}
			fill(b, seed)
			h, err := p.Handle(b)
			if err != nil {
				fmt.Println(errLine(err))
				continue
			}
			fmt.Println("H", fmtHandle(h))
		case len(f) == 7 && f[0] == "C":
			h, _ := parseHandle(f[1:6])
			seed, _ := strconv.ParseUint(f[6], 10, 64)
			b, err := p.Bytes(h)
			if err == nil {
				err = verify(b, seed)
			}
			if err != nil {
				fmt.Println(errLine(err))
				continue
			}
			fmt.Println("OK")
		case len(f) == 6 && f[0] == "F":
			h, _ := parseHandle(f[1:6])
			if err := p.FreeHandle(h); err != nil {
				fmt.Println(errLine(err))
				continue
			}
			fmt.Println("OK")
		case len(f) == 1 && f[0] == "X": // close the socket, stay alive
			p.granter.(*connGranter).c.Close()
			fmt.Println("OK")
		case len(f) == 1 && f[0] == "Q":
			close(stop)
			wg.Wait()
			select {
			case err := <-churnErr:
				fmt.Println("E churn:", err)
				return 1
			default:
			}
			p.Collect()
			if err := p.Detach(); err != nil {
				fmt.Println(errLine(err))
				return 1
			}
			fmt.Println("OK")
			return 0
		default:
			fmt.Println("E bad command", in.Text())
		}
	}
	return 1
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
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+path), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		if !c.dead {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line := c.read(t)
	if _, err := fmt.Sscanf(line, "READY %d", &c.slot); err != nil {
		t.Fatalf("child: %q", line)
	}
	return c
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

// buf is a live buffer of the model.
type buf struct {
	proc int // 0: the owner; 1, 2: the children
	h    Handle
	seed uint64
}

func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	multiProcess(t, Options{})
}

// TestMultiProcessVMM is TestMultiProcess on a VMM pool of the fake driver: every process
// imports the owner's exported granules.
func TestMultiProcessVMM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	multiProcess(t, Options{Backend: VMM, Device: cuda.Wrap[*pcuda.Device](d)}, childDeviceEnv+"=1")
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 {
		t.Fatalf("%d handles, %d reservations left", st.Handles, st.Reservations)
	}
}

// multiProcess runs the owner of a pool of backend o.Backend and two children, which start
// with env.
func multiProcess(t *testing.T, o Options, env ...string) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	// FallbackPageable: under an 8 MiB memlock limit (CI runs the tests as nobody so), the
	// 96 MiB pool runs pageable; it is locked where the limit allows.
	o.Size, o.GrantSize, o.RingSize, o.FallbackPageable = 96<<20, 2<<20, 64, true
	w, err := Serve(path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	kids := []*child{nil, startChild(t, path, env...), startChild(t, path, env...)}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	var live []buf
	alive := []int{0, 1, 2}
	pick := func() int { return alive[r.IntN(len(alive))] }

	alloc := func(proc int) {
		n, s := 1+r.IntN(4096), r.Uint64()
		if r.IntN(5) == 0 {
			n = 1 + r.IntN(48<<10)
		}
		if proc == 0 {
			b, err := w.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			fill(b, s)
			h, err := w.Handle(b)
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, buf{0, h, s})
			return
		}
		line := kids[proc].do(t, "A %d %d", n, s)
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != "H" {
			t.Fatalf("child %d alloc: %q", proc, line)
		}
		h, err := parseHandle(f[1:])
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, buf{proc, h, s})
	}
	// check has proc check b; want is "OK" or "E stale".
	check := func(proc int, b buf, want string) {
		if proc == 0 {
			got := "OK"
			bs, err := w.Bytes(b.h)
			if err == nil {
				err = verify(bs, b.seed)
			}
			if err != nil {
				got = errLine(err)
			}
			if got != want {
				t.Fatalf("owner checks %v of process %d: %s, want %s", b.h, b.proc, got, want)
			}
			return
		}
		if got := kids[proc].do(t, "C %s %d", fmtHandle(b.h), b.seed); got != want {
			t.Fatalf("child %d checks %v of process %d: %s, want %s", proc, b.h, b.proc, got, want)
		}
	}
	free := func(proc int, b buf, want string) {
		got := "OK"
		if proc == 0 {
			if err := w.FreeHandle(b.h); err != nil {
				got = errLine(err)
			}
		} else {
			got = kids[proc].do(t, "F %s", fmtHandle(b.h))
		}
		if got != want {
			t.Fatalf("process %d frees %v of process %d: %s, want %s", proc, b.h, b.proc, got, want)
		}
	}
	grantsOf := func(slot int) (n int) {
		for g := 0; g < w.c.grants(); g++ {
			if _, s := w.c.grant(g); s == slot {
				n++
			}
		}
		return n
	}

	const ops = 600
	for op := 0; op < ops; op++ {
		if op == ops/2 { // kill child 2 mid-way, with its buffers live and handed around
			k := kids[2]
			if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = k.cmd.Wait()
			k.dead = true
			alive = []int{0, 1}
			waitFor(t, func() bool { return w.Attached() == 1 && grantsOf(k.slot) == 0 })
			kept := live[:0]
			for _, b := range live {
				if b.proc != 2 {
					kept = append(kept, b)
					continue
				}
				check(pick(), b, "E stale")
				free(pick(), b, "E stale")
			}
			live = kept
			for _, b := range live { // the others' bytes are intact
				check(pick(), b, "OK")
			}
		}
		switch x := r.IntN(10); {
		case x < 4 || len(live) == 0:
			alloc(pick())
		case x < 7:
			check(pick(), live[r.IntN(len(live))], "OK")
		default:
			i := r.IntN(len(live))
			free(pick(), live[i], "OK")
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		if len(live) > 60 { // keep the pool from filling
			free(pick(), live[0], "OK")
			live = live[1:]
		}
	}
	for _, b := range live {
		check(pick(), b, "OK")
		free(pick(), b, "OK")
	}
	if got := kids[1].do(t, "Q"); got != "OK" {
		t.Fatalf("child 1 detach: %s", got)
	}
	_ = kids[1].cmd.Wait()
	kids[1].dead = true
	waitFor(t, func() bool { return w.Attached() == 0 })
	waitFor(t, func() bool { w.Collect(); return w.Stats().Heap.Live == 0 })
	st := w.Stats()
	if st.RemoteFreeErrors != 0 {
		t.Errorf("%d remote frees refused", st.RemoteFreeErrors)
	}
	for s := 1; s < w.slots; s++ {
		if n := grantsOf(s); n != 0 {
			t.Errorf("slot %d still holds %d grants", s, n)
		}
	}
	t.Logf("owner: %d remote frees in, %d out, %d dropped; %d bytes of grants", st.RemoteFreesIn, st.RemoteFreesOut, st.RemoteFreesDropped, st.Grants)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
