package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// needUCX skips the test, saying why, where libucp.so.0 cannot be loaded, as the GPU tests skip
// without a driver; with PINMALLOC_REQUIRE_UCX set (CI, which installs UCX) that fails it.
func needUCX(t testing.TB) {
	t.Helper()
	if err := ucx.Load(); err != nil {
		if os.Getenv("PINMALLOC_REQUIRE_UCX") != "" {
			t.Fatalf("UCX required (PINMALLOC_REQUIRE_UCX is set): %v", err)
		}
		t.Skipf("no UCX (apt-get install libucx0): %v", err)
	}
}

// transport is a UCX configuration the two-process tests run under: TCP on the loopback
// device, with UCX's failure handling; and shared memory (posix, sysv, cma), which UCX 1.13
// gives only endpoints without it (Options.SharedMemory: the worker watches its peers'
// processes itself), connected by worker address (the listener's connection manager is TCP's).
type transport struct {
	name string
	env  [][2]string
	shm  bool
	seg  bool // both processes' pools are of a SegmentSource: puts and gets by copy
}

var transports = []transport{
	{"tcp", [][2]string{{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, false, false},
	{"shm", [][2]string{{"UCX_TLS", "sm"}}, true, false},
	{"shm-segments", [][2]string{{"UCX_TLS", "sm"}}, true, true},
}

// shmEnv, set, makes the child's worker use Options.SharedMemory.
const shmEnv = "PINMALLOC_REMOTE_TEST_SHM"

// segEnv, set, makes the child's pool one of a SegmentSource.
const segEnv = "PINMALLOC_REMOTE_TEST_SEGMENTS"

// set sets the transport's environment for this process (UCX reads it when a worker is made)
// and returns it for a child's.
func (tr transport) set(t *testing.T) []string {
	var env []string
	for _, kv := range tr.env {
		t.Setenv(kv[0], kv[1])
		env = append(env, kv[0]+"="+kv[1])
	}
	if tr.shm {
		env = append(env, shmEnv+"=1")
	}
	if tr.seg {
		env = append(env, segEnv+"=1")
	}
	return env
}

// newWorker returns a worker of this process with the zero Options, closed at the test's end.
func newWorker(t testing.TB) *Worker {
	t.Helper()
	w, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// child is the other process.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	listen string
	addr   []byte
	c      *Conn
	stderr *strings.Builder
	exited chan error
}

// startChild starts the other process with env and connects w to it: by its listener, or by
// its worker address (dial).
func startChild(t *testing.T, w *Worker, env []string, dial bool) *child {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ch := &child{t: t, cmd: exec.Command(self, "-test.run=^$"), stderr: &strings.Builder{}, exited: make(chan error, 1)}
	ch.cmd.Env = append(append(os.Environ(), childEnv+"=target"), env...)
	ch.cmd.Stderr = ch.stderr
	out, err := ch.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if ch.stdin, err = ch.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := ch.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ch.exited <- ch.cmd.Wait() }()
	t.Cleanup(func() {
		_ = ch.stdin.Close()
		select {
		case <-ch.exited:
		case <-time.After(5 * time.Second):
			_ = ch.cmd.Process.Kill()
			<-ch.exited
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "L ") {
		t.Fatalf("child: %q, %v; stderr: %s", line, err, ch.stderr)
	}
	f := strings.Fields(line)
	ch.listen = f[1]
	if ch.addr, err = hex.DecodeString(f[2]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if dial {
		ch.c, err = w.Dial(ctx, ch.addr)
	} else {
		ch.c, err = w.Connect(ctx, ch.listen)
	}
	if err != nil {
		t.Fatalf("connect to the child: %v; its stderr: %s", err, ch.stderr)
	}
	return ch
}

// call sends a command and returns the reply.
func (ch *child) call(cmd string, payload []byte) []byte {
	ch.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := append([]byte(cmd+"\n"), payload...)
	if err := ch.c.Send(ctx, m); err != nil {
		ch.t.Fatalf("send %q: %v", cmd, err)
	}
	r, err := ch.c.Recv(ctx)
	if err != nil {
		ch.t.Fatalf("reply to %q: %v; child stderr: %s", cmd, err, ch.stderr)
	}
	if strings.HasPrefix(string(r), "E ") {
		ch.t.Fatalf("%q: child says %s", cmd, r)
	}
	return r
}

// alloc asks the child for k buffers of n bytes, buffer i filled with pattern(seed+i).
func (ch *child) alloc(n int, seed uint64, k int) []Descriptor {
	ch.t.Helper()
	r := ch.call(fmt.Sprintf("alloc %d %d %d", n, seed, k), nil)
	var ds []Descriptor
	for len(r) > 0 {
		d, rest, err := ParseDescriptor(r)
		if err != nil {
			ch.t.Fatal(err)
		}
		ds, r = append(ds, d), rest
	}
	if len(ds) != k {
		ch.t.Fatalf("%d descriptors, want %d", len(ds), k)
	}
	return ds
}

// crc returns the CRC-64 of the child's buffer i.
func (ch *child) crc(i int) uint64 {
	ch.t.Helper()
	r := strings.TrimPrefix(string(ch.call(fmt.Sprintf("crc %d", i), nil)), "crc ")
	v, err := strconv.ParseUint(r, 10, 64)
	if err != nil {
		ch.t.Fatal(r, err)
	}
	return v
}

// quit ends the child, which must exit 0: every Close it made succeeded.
func (ch *child) quit() {
	ch.t.Helper()
	if r := ch.call("quit", nil); string(r) != "bye" {
		ch.t.Fatalf("quit: %q", r)
	}
	select {
	case err := <-ch.exited:
		if err != nil {
			ch.t.Fatalf("child exited with %v; stderr: %s", err, ch.stderr)
		}
		ch.exited <- nil
	case <-time.After(10 * time.Second):
		ch.t.Fatal("child did not exit")
	}
}

// kill kills the child with SIGKILL and waits for it.
func (ch *child) kill() {
	_ = ch.cmd.Process.Signal(syscall.SIGKILL)
	<-ch.exited
	ch.exited <- nil
}

// local is this process's side of a test: a worker and a registered pool.
type local struct {
	w    *Worker
	pool *pinned.Pool
	reg  *Registration
}

func newLocal(t *testing.T) *local { t.Helper(); return newLocalMode(t, transports[0], ModeAuto) }

func newLocalFor(t *testing.T, tr transport) *local { t.Helper(); return newLocalMode(t, tr, ModeAuto) }

func newLocalMode(t *testing.T, tr transport, mode Mode) *local {
	t.Helper()
	w, err := New(Options{Name: "test", Mode: mode, SharedMemory: tr.shm})
	if err != nil {
		t.Fatal(err)
	}
	var src arena.Provider
	if tr.seg {
		src = w.SegmentSource(SegmentOptions{})
	}
	pool, err := testPool(src)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := w.Register(pool)
	if err != nil {
		t.Fatal(err)
	}
	l := &local{w: w, pool: pool, reg: reg}
	t.Cleanup(func() {
		if err := errors.Join(l.w.Close(), l.pool.Close()); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return l
}

func (l *local) alloc(t *testing.T, n int, seed uint64) []byte {
	t.Helper()
	b, err := l.pool.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	fill(b, seed)
	return b
}

func check(t *testing.T, what string, b []byte, seed uint64) {
	t.Helper()
	want := make([]byte, len(b))
	if fill(want, seed); bytes.Equal(b, want) {
		return
	}
	for i := range b {
		if b[i] != pattern(seed, i) {
			t.Fatalf("%s: byte %d of %d is %#x, want %#x", what, i, len(b), b[i], pattern(seed, i))
		}
	}
}

func crcOf(b []byte) uint64 { return crc64.Checksum(b, crcTab) }

var procSizes = []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 3 << 20}
