package ucx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// needUCX skips the test, saying why, where libucp.so.0 cannot be loaded; PINMALLOC_REQUIRE_UCX
// set makes that a failure (CI sets it once it has installed UCX).
func needUCX(t testing.TB) {
	t.Helper()
	if err := Load(); err != nil {
		if os.Getenv("PINMALLOC_REQUIRE_UCX") != "" {
			t.Fatalf("UCX required (PINMALLOC_REQUIRE_UCX): %v", err)
		}
		t.Skipf("no UCX: %v", err)
	}
}

// pair is two workers of one context each, in this process, over whatever transports the
// environment allows (the tests set UCX_TLS where it matters).
type pair struct {
	c    [2]*Context
	w    [2]*Worker
	done map[uint32]int32
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{done: map[uint32]int32{}}
	for i := range p.w {
		c, err := NewContext("test")
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.NewWorker(64, 1<<20)
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		p.c[i], p.w[i] = c, w
	}
	t.Cleanup(func() {
		for i := range p.w {
			p.w[i].Destroy()
			p.c[i].Close()
		}
	})
	return p
}

// unpack connects worker 0 to worker 1 and unpacks rkey, a key of worker 1's context, there;
// the key is destroyed at the test's end.
func (p *pair) unpack(t *testing.T, rkey []byte) (Ep, Rkey) {
	t.Helper()
	addr, err := p.w[1].Address()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := p.w[0].ConnectAddress(addr)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := p.w[0].UnpackRkey(ep, rkey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.w[0].DestroyRkey(rk) })
	return ep, rk
}

// progress progresses both workers until cond holds (or fails the test after 10 s).
func (p *pair) progress(t *testing.T, cond func() bool) {
	t.Helper()
	var cq [16]Completion
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		for _, w := range p.w {
			n, _ := w.Progress(4, cq[:])
			for _, c := range cq[:n] {
				p.done[c.Slot] = c.Status
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

func TestLoadAndVersion(t *testing.T) {
	needUCX(t)
	maj, min, rel, err := Version()
	if err != nil || maj != 1 || min < apiMinor {
		t.Fatalf("Version() = %d.%d.%d, %v", maj, min, rel, err)
	}
	t.Logf("UCX %d.%d.%d", maj, min, rel)
}

func TestLoadMissingLibrary(t *testing.T) {
	_, err := open("/nonexistent/libucp.so.0")
	if !errors.Is(err, pinmalloc.ErrNoUCX) {
		t.Fatalf("open of a missing library: %v, want ErrNoUCX", err)
	}
}

func TestStatusText(t *testing.T) {
	needUCX(t)
	if s := Status(-25).Error(); s != "ucx: Connection reset by remote peer" {
		t.Errorf("Status(-25).Error() = %q", s)
	}
	if !errors.Is(Status(-4), pinmalloc.ErrOutOfMemory) || !errors.Is(Status(-80), pinmalloc.ErrRefused) || errors.Is(Status(-5), pinmalloc.ErrRefused) {
		t.Error("Status.Is maps wrongly")
	}
}

// TestPutGetMessage registers a region reserved PROT_NONE and committed in part (as an arena's
// is), connects two workers by address, and moves bytes with a put, a get and a message.
func TestPutGetMessage(t *testing.T) {
	needUCX(t)
	p := newPair(t)
	const size = 4 << 20
	region := make([][]byte, 2)
	for i := range region {
		b, err := unix.Mmap(-1, 0, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Munmap(b) })
		if err := unix.Mprotect(b[:1<<20], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			t.Fatal(err)
		}
		region[i] = b
	}
	before := MemMaps()
	mems := make([]Mem, 2)
	for i := range mems {
		m, err := p.c[i].MemMap(mem.Addr(region[i]), size, MemoryHost, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.c[i].MemUnmap(m) })
		mems[i] = m
	}
	if got := MemMaps() - before; got != 2 {
		t.Errorf("MemMaps grew by %d, want 2", got)
	}
	rkey, err := p.c[1].PackRkey(mems[1])
	if err != nil {
		t.Fatal(err)
	}
	ep, rk := p.unpack(t, rkey)

	src, dst := region[0][:64<<10], region[1][:64<<10]
	for i := range src {
		src[i] = byte(i * 7)
	}
	ops := []Op{
		{Ep: ep, Rkey: rk, Mem: mems[0], Local: uint64(mem.Addr(src)), Remote: uint64(mem.Addr(dst)), Length: uint64(len(src)), Slot: 1, Kind: OpPut},
		{Ep: ep, Slot: 2, Kind: OpFlush},
	}
	if _, err := p.w[0].Post(ops); err != nil {
		t.Fatal(err)
	}
	for _, o := range ops {
		if o.Status < 0 {
			t.Fatalf("post: %v", Status(o.Status))
		}
		if o.Status == 0 {
			p.done[o.Slot] = 0
		}
	}
	p.progress(t, func() bool { _, a := p.done[1]; _, b := p.done[2]; return a && b })
	if p.done[1] != 0 || p.done[2] != 0 {
		t.Fatalf("put %d, flush %d", p.done[1], p.done[2])
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("put: bytes differ")
	}

	// A get of the remote's next 64 KiB into the local's.
	rsrc, ldst := region[1][64<<10:128<<10], region[0][64<<10:128<<10]
	for i := range rsrc {
		rsrc[i] = byte(i * 13)
	}
	get := []Op{{Ep: ep, Rkey: rk, Mem: mems[0], Local: uint64(mem.Addr(ldst)), Remote: uint64(mem.Addr(rsrc)), Length: uint64(len(ldst)), Slot: 3, Kind: OpGet}}
	if _, err := p.w[0].Post(get); err != nil || get[0].Status < 0 {
		t.Fatalf("get: %v %v", err, Status(get[0].Status))
	}
	if get[0].Status == 0 {
		p.done[3] = 0
	}
	p.progress(t, func() bool { _, ok := p.done[3]; return ok })
	if !bytes.Equal(rsrc, ldst) {
		t.Fatal("get: bytes differ")
	}

	info, err := p.w[0].EpInfo(ep)
	t.Logf("%v\n%s", err, info)
	// A message, with the reply endpoint of the sender.
	msg := binary.LittleEndian.AppendUint64(nil, 0x1234)
	inflight, err := p.w[0].SendMessage(ep, msg, false, true, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !inflight {
		p.done[4] = 0
	}
	var evs []Event
	p.progress(t, func() bool { evs = p.w[1].Events(evs, 8); _, ok := p.done[4]; return ok && len(evs) > 0 })
	if evs[0].Kind != EventMessage || !bytes.Equal(evs[0].Data, msg) {
		t.Fatalf("event %+v", evs[0])
	}
	if inflight, err := p.w[0].CloseEp(ep, true, 5); err != nil {
		t.Fatal(err)
	} else if inflight {
		p.progress(t, func() bool { _, ok := p.done[5]; return ok })
	}
}

func TestOpLayout(t *testing.T) {
	if unsafe.Sizeof(Op{}) != opSize() {
		t.Fatalf("Op is %d bytes, pm_op %d", unsafe.Sizeof(Op{}), opSize())
	}
}

// TestListenerReplyEp connects by socket address and checks that a message sent with reply
// names, at the listener's side, the endpoint the listener's side accepted; and that the
// connection request says the client's address.
func TestListenerReplyEp(t *testing.T) {
	needUCX(t)
	p := newPair(t)
	sa := []byte{2, 0, 0, 0, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0} // AF_INET, port 0, 127.0.0.1
	l, err := p.w[1].Listen(sa, 7)
	if err != nil {
		t.Fatal(err)
	}
	port, err := p.w[1].ListenerPort(l)
	if err != nil || port == 0 {
		t.Fatal(port, err)
	}
	csa := append([]byte(nil), sa...)
	csa[2], csa[3] = byte(port>>8), byte(port)
	ep, err := p.w[0].ConnectSockaddr(csa)
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	p.progress(t, func() bool { evs = p.w[1].Events(evs, 8); return len(evs) > 0 })
	if evs[0].Kind != EventConn || evs[0].Tag != 7 {
		t.Fatalf("event %+v", evs[0])
	}
	ca, err := p.w[1].ConnRequestAddr(ConnRequest(evs[0].Handle))
	if err != nil {
		t.Fatal(err)
	}
	client := SockaddrString(ca)
	host, cport, err := net.SplitHostPort(client)
	if err != nil || host != "127.0.0.1" || cport == "0" {
		t.Errorf("the client's address is %q; want 127.0.0.1 and its port", client)
	}
	sep, err := p.w[1].Accept(ConnRequest(evs[0].Handle))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.w[0].SendMessage(ep, []byte("hello"), true, false, 1); err != nil {
		t.Fatal(err)
	}
	evs = evs[:0]
	p.progress(t, func() bool { evs = p.w[1].Events(evs, 8); return len(evs) > 0 })
	t.Logf("client %s, reply ep %#x, accepted %#x", client, evs[0].Handle, sep)
	if evs[0].Handle != uintptr(sep) {
		t.Errorf("reply ep %#x is not the accepted ep %#x", evs[0].Handle, sep)
	}
}

// TestMemAllocRkeyPtr allocates a region with UCX (a shared segment with UCX_TLS=sm), and
// reaches it from the other worker through its unpacked key's local mapping (ucp_rkey_ptr).
func TestMemAllocRkeyPtr(t *testing.T) {
	needUCX(t)
	t.Setenv("UCX_TLS", "sm")
	p := newPair(t)
	const size = 4 << 20
	m, addr, got, err := p.c[1].MemAlloc(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.c[1].MemUnmap(m) })
	region := mem.Bytes(addr, got)
	for i := range region {
		region[i] = byte(i * 7)
	}
	rkey, err := p.c[1].PackRkey(m)
	if err != nil {
		t.Fatal(err)
	}
	p.w[0].NoPeerFailure = true
	_, rk := p.unpack(t, rkey)
	lp, err := p.w[0].RkeyPtr(rk, uint64(addr)+4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("allocated %d at %#x, mapped at %#x", got, addr, lp)
	peer := mem.Bytes(lp, 64<<10)
	if !bytes.Equal(peer, region[4096:4096+64<<10]) {
		t.Fatal("bytes differ")
	}
	peer[0]++ // the same memory, not a copy
	if region[4096] != peer[0] {
		t.Fatal("a write through the peer's mapping did not show in the segment")
	}
}

// TestProgressAllocatesNothing: a progress round (Progress, then Events), which the progress
// goroutine of package remote runs over and over while operations are in flight, allocates
// nothing when it finds nothing: their out-parameters, passed to C, were moved to the heap, an
// allocation each, every round.
func TestProgressAllocatesNothing(t *testing.T) {
	needUCX(t)
	p := newPair(t)
	w := p.w[0]
	var cq [16]Completion
	evs := make([]Event, 0, 64)
	w.Progress(4, cq[:])
	if a := testing.AllocsPerRun(200, func() {
		w.Progress(4, cq[:])
		evs = w.Events(evs[:0], EventBatch)
	}); a != 0 {
		t.Fatalf("an idle progress round: %.1f allocations, want 0", a)
	}
}
