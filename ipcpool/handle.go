package ipcpool

import (
	"fmt"
	"sync"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Handle names one buffer of a pool in every process attached to it: a small value to pass
// between processes (over any channel: a pipe, a queue, the pool's own memory) that
// Process.Bytes turns back into the buffer's bytes mapped in the receiving process.
//
// A handle names one allocation, not a place: once the buffer is let go (its holder freed it,
// a FreeHandle took its allocation, its holder died), its handle is refused with
// ErrStaleHandle by Bytes, FreeHandle and Retain, every time, and never names the buffer
// allocated in its place.
type Handle struct {
	// Pool is the pool's random identity: a handle of another pool is refused.
	Pool uint64
	// Entry is the buffer's entry in the pool's export table, Gen the entry's generation.
	Entry, Gen uint32
	// Offset and Length place the buffer in the pool.
	Offset, Length uint64
}

// String formats the handle for logs.
func (h Handle) String() string {
	return fmt.Sprintf("pool %016x entry %d gen %d offset %#x length %d", h.Pool, h.Entry, h.Gen, h.Offset, h.Length)
}

// exportState is what a process knows of handles, in Go memory: the buffers it shared
// (recs, by its part of the export table, and byAddr), the peers' buffers it mapped with
// Bytes (peers: so that Free of one finds its handle), and the retains it holds.
type exportState struct {
	mu      sync.Mutex
	recs    []exportRec // by index in the slot's part of the table, grown as indexes are used
	byAddr  map[uintptr]int
	free    []int // indexes known free
	peers   map[uintptr]Handle
	prune   int // peers' size at which to drop its stale handles
	retains map[Handle]int
	// untaken: entries whose retain bit a Retain set too late and could not take back (a peer
	// rewrote the word without end): the drainer takes them back (clearUntaken).
	untaken []int
	// forgot, made by a call that waits for a take-in (waitTake), is closed as a take-in forgets
	// its record (forget).
	forgot chan struct{}
}

// exportRec is a process's record of a buffer it shared.
type exportRec struct {
	addr, n uintptr
	gen     uint32
	// dropped: this process freed the buffer after the owner let its allocation go (eGone), and
	// takes it back once no reference is left (freegone.go).
	dropped bool
	// taking: a take-in (takeRetired, takeGone's scan) gives the buffer back to the pool,
	// outside ex.mu, and forgets the record after (forget): a call that finds it by its address
	// meanwhile waits for that (waitTake).
	taking bool
}

func newExportState(exports int) exportState {
	return exportState{byAddr: map[uintptr]int{}, peers: map[uintptr]Handle{},
		prune: 1024, retains: map[Handle]int{}}
}

// Handle returns the handle of buffer b: one of this process's (a whole live buffer, as Alloc
// returned it, or resliced from its start), which is shared from now on (a buffer shared
// stays live until every reference to it is let go: see FreeHandle, Retain), or a peer's
// buffer this process mapped with Bytes. Handle of the same buffer again returns the same
// handle. It fails with ErrForeignHandle for a slice that is neither, and ErrPoolFull when the
// process has Options.Exports buffers shared already.
func (p *Process) Handle(b []byte) (Handle, error) {
	if !p.enter() {
		return Handle{}, ErrClosed
	}
	defer p.exit()
	addr, n := mem.Addr(b), uintptr(cap(b))
	off, ok := p.sp.in(addr, n)
	if !ok {
		return Handle{}, fmt.Errorf("%w: [%#x, +%d)", ErrForeignHandle, addr, n)
	}
	ex := &p.ex
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if !p.src.holds(off) {
		if h, ok := ex.peers[addr]; ok {
			return h, nil
		}
		return Handle{}, fmt.Errorf("%w: %#x is a buffer of another process this one has not mapped with Bytes", ErrForeignHandle, addr)
	}
	for {
		i, ok := ex.byAddr[addr]
		if !ok {
			break
		}
		r := ex.recs[i]
		if !r.taking {
			return p.handleOf(i, r.gen, addr, r.n), nil
		}
		// Let go, and given back to the pool now: b is that buffer (which Share then refuses,
		// freed) or, once the pool has it back, one allocated in its place.
		p.waitTake()
	}
	i, gen, ok := p.freeEntry()
	if !ok {
		return Handle{}, fmt.Errorf("%w: %d buffers shared already (Options.Exports)", ErrPoolFull, p.exports)
	}
	if err := p.Pool.Share(b[:cap(b)]); err != nil {
		ex.free = append(ex.free, i)
		return Handle{}, err
	}
	e := p.slot*p.exports + i
	c := &p.c
	c.store(c.entry(e)+eOffset, uint64(off))
	c.store(c.entry(e)+eLength, uint64(n))
	c.store(c.entry(e)+eHolder, packHolder(p.slot, p.serial))
	for j := range 4 {
		c.store(c.entry(e)+eRetain+j, 0)
	}
	c.store(c.entry(e)+eState, packState(gen, eLive|eAlloc))
	ex.recs[i] = exportRec{addr: addr, n: n, gen: gen}
	ex.byAddr[addr] = i
	p.st.shared.Add(1)
	return p.handleOf(i, gen, addr, n), nil
}

// handleOf is the handle of entry i of this process's part of the table.
func (p *Process) handleOf(i int, gen uint32, addr, n uintptr) Handle {
	return Handle{Pool: p.id, Entry: uint32(p.slot*p.exports + i), Gen: gen, Offset: uint64(addr - p.sp.base), Length: uint64(n)}
}

// freeEntry takes a free entry of this process's part of the table, with its generation.
// Its looks again for entries let go are bounded (casTries): a peer that rewrites the entries'
// states between a look and the take cannot keep it looking (it says none then). Called with
// ex.mu held.
func (p *Process) freeEntry() (int, uint32, bool) {
	ex := &p.ex
	for looks := 0; looks < casTries; {
		for len(ex.free) > 0 {
			i := ex.free[len(ex.free)-1]
			ex.free = ex.free[:len(ex.free)-1]
			// Free in the table too: an entry of the slot's previous process that others
			// still retain (an orphan: table.go) is not, until the owner lets it go.
			if w := p.c.loadAgain(p.c.entry(p.slot*p.exports+i) + eState); w&eFlags == 0 && ex.recs[i].addr == 0 {
				return i, entryGen(w), true
			}
		}
		if n := len(ex.recs); n < p.exports { // indexes never used yet
			end := min(n+256, p.exports)
			ex.recs = append(ex.recs, make([]exportRec, end-n)...)
			for i := end - 1; i >= n; i-- {
				ex.free = append(ex.free, i)
			}
			continue
		}
		// Every index used: look again for entries let go since.
		looks++
		for i := range ex.recs {
			if ex.recs[i].addr == 0 && p.c.loadAgain(p.c.entry(p.slot*p.exports+i)+eState)&eFlags == 0 {
				ex.free = append(ex.free, i)
			}
		}
		if len(ex.free) == 0 {
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// resolve checks h against this pool's table and returns its entry and the buffer's pool
// offset and length. The handle's every field must agree with the entry's, which must be
// live at the handle's generation, hold an allocation or a retain, and name a holder in the
// slot the entry belongs to.
func (p *Process) resolve(h Handle) (e int, err error) {
	if p.pause != nil {
		p.pause()
	}
	if h.Pool != p.id || int64(h.Entry) >= int64(p.slots*p.exports) || !p.sameRegion(h.Offset, h.Length) {
		return 0, fmt.Errorf("%w: %v", ErrForeignHandle, h)
	}
	e = int(h.Entry)
	c := &p.c
	w := c.load(c.entry(e) + eState)
	holder := c.load(c.entry(e) + eHolder)
	if entryGen(w) != h.Gen || w&(eLive|eRetiring) != eLive || c.load(c.entry(e)+eOffset) != h.Offset ||
		c.load(c.entry(e)+eLength) != h.Length || int(holder&0xffff) != e/p.exports {
		return 0, fmt.Errorf("%w: %v", ErrStaleHandle, h)
	}
	return e, nil
}

// Bytes returns the buffer of a handle, mapped in this process. It fails with
// ErrForeignHandle for a handle of another pool or outside it, and ErrStaleHandle for one
// whose buffer was let go. The bytes are the buffer's while a reference to it is held: the
// allocation's (until a Free or FreeHandle) or a Retain.
func (p *Process) Bytes(h Handle) ([]byte, error) {
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.exit()
	if _, err := p.resolve(h); err != nil {
		return nil, err
	}
	b := p.sp.bytes(uintptr(h.Offset), uintptr(h.Length))
	if !p.src.holds(uintptr(h.Offset)) {
		p.ex.mu.Lock()
		p.ex.peers[mem.Addr(b)] = h
		p.prunePeers()
		p.ex.mu.Unlock()
	}
	return b, nil
}

// prunePeers drops the handles of peers' buffers let go since, once there are many. Called
// with ex.mu held.
func (p *Process) prunePeers() {
	ex := &p.ex
	if len(ex.peers) < ex.prune {
		return
	}
	for a, h := range ex.peers {
		if _, err := p.resolve(h); err != nil {
			delete(ex.peers, a)
		}
	}
	ex.prune = max(1024, 2*len(ex.peers))
}

// FreeHandle lets go the allocation of the buffer of h, as a Free of the buffer in its holder
// would: the buffer goes back to its holder once no process retains it. A second FreeHandle
// of the same buffer (a replayed handle), or one of a buffer let go, is refused with
// ErrStaleHandle and changes nothing, as does one that fails with ErrProtocol (another
// process rewrites the buffer's entry without end: try again). The caller must have let every
// stream that used the buffer pass first (a synchronize, or an event waited on).
func (p *Process) FreeHandle(h Handle) error {
	if !p.enter() {
		return ErrClosed
	}
	defer p.exit()
	e, err := p.resolve(h)
	if err != nil {
		return err
	}
	c := &p.c
	i := c.entry(e) + eState
	for try := 0; ; try++ {
		if try == casTries {
			return contended(fmt.Sprintf("the export entry of %v", h))
		}
		w := c.load(i)
		if entryGen(w) != h.Gen || w&eFlags != eLive|eAlloc {
			return fmt.Errorf("%w: %v (its allocation was let go)", ErrStaleHandle, h)
		}
		if c.cas(i, w, w&^eAlloc) {
			break
		}
	}
	if p.pauseFree != nil {
		p.pauseFree()
	}
	// The handle stays in peers (a Free by address finds it stale) until pruned: no lock here.
	if c.tryRetire(e, h.Gen) {
		p.deliver(e, h.Gen)
	}
	p.st.freedHandles.Add(1)
	return nil
}
