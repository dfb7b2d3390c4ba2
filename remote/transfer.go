package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// Transfer is a batch of puts and gets on one connection, posted together and completed
// together: the KV blocks of a request, say. Add operations with Put and Get (PutDevice and
// GetDevice for device memory), post them with Start (one cgo call for as many as there are
// slots), then wait with Wait or select on Done. It completes once every get has landed and
// every put has reached the peer's memory (a flush of the endpoint after the puts). A Transfer
// is reused after Reset, keeping its memory: a batch in steady state allocates one channel.
//
// Each local buffer is held in its pool (pinned.Pool.Hold) from Put or Get until the transfer ends,
// and each local device block in its heap (device.Heap.Hold) from PutDevice or GetDevice: a Free
// or FreeAsync of it meanwhile takes effect then, so memory in flight is never handed out again,
// and its region is never deregistered under it. A transfer on a connection abandoned (a peer that
// died without UCX's failure handling, or a worker closed with SharedMemory), or failed with
// SharedMemory (whose endpoint's close UCX cannot force: a peer that stalls keeps what is in
// flight), ends with the connection's error while UCX may still hold its puts and gets: their buffers and blocks stay
// held until UCX completes them, or the worker's Close has made its last call on UCX's worker
// (for good on an RDMA NIC: Worker.Close). Put and Get first wait for the CUDA streams recorded
// on the buffer (pinned.Pool.WaitStreams: copies queued into or out of it). A remote buffer is the
// peer's to keep live until the transfer ends (the application's protocol: it is told by a
// message).
type Transfer struct {
	c     *Conn
	ops   []ucx.Op
	descs []Descriptor   // the remote buffer of each put and get
	lrs   []*localRegion // the local region of each put and get
	holds []localHold    // the holds on the local buffers and device blocks
	gets  []bool         // which operations are gets
	// partOf is the operation each part of a split put or get is of (splitData): the part at
	// index len(descs)+k of ops is of operation partOf[k].
	partOf []uint32
	// shares are the holds of puts by message that zombie slots share (zombieHold), by
	// operation: made when a connection is abandoned only.
	shares map[uint32]*sharedHold
	// rks are the peer's regions whose keys it uses, counted in their users until it ends (use).
	rks   []*rkeyEntry
	puts  bool
	bytes uint64

	// Under the worker's mutex once started:
	started, finishing bool
	posted, pending    int
	err                error
	done               chan struct{}
}

// NewTransfer returns an empty transfer on c.
func (c *Conn) NewTransfer() *Transfer { return &Transfer{c: c, done: make(chan struct{})} }

// Put adds a put of src, a buffer (or part of one) of a pool registered with the worker, to
// the start of the peer's buffer dst: len(src) bytes, at most dst.Len() (use dst.Slice for an
// offset). It checks everything it can before Start: dst is of the connection's peer
// (ErrDescriptor), the length fits (ErrOutOfRange), src is registered memory
// (ErrNotRegistered), and holds src in its pool.
func (t *Transfer) Put(src []byte, dst Descriptor) error {
	return t.add(ucx.OpPut, mem.Addr(src), len(src), src, dst)
}

// Get adds a get of len(dst) bytes from the start of the peer's buffer src (at most
// src.Len()) into dst, registered memory as for Put.
func (t *Transfer) Get(dst []byte, src Descriptor) error {
	return t.add(ucx.OpGet, mem.Addr(dst), len(dst), dst, src)
}

// PutDevice is Put from n bytes of device memory at src, inside one live block of a device heap
// registered with RegisterDevice (src may point inside the block). It holds the block in its heap
// (device.Heap.Hold) until the transfer ends, as Put holds a pool's buffer: a Free or FreeAsync
// of the block meanwhile returns at once and takes effect at the transfer's end, or, when the
// transfer ends with its connection abandoned, or failed with SharedMemory (UCX may still hold
// the operation), once UCX completes it or the worker's Close has made its last call on UCX's worker
// (on an RDMA NIC, never: the heap's Close then says heap.ErrLiveBlocks). Copies or kernels
// queued on CUDA streams into or out of the range are the caller's to wait for first. Errors: a
// block that is not live (freed, or with a free pending) wraps ErrNotRegistered and the heap's
// error (device.ErrNotOwned); a range past the block's end, ErrOutOfRange.
func (t *Transfer) PutDevice(src cuda.DevicePtr, n int, dst Descriptor) error {
	return t.add(ucx.OpPut, uintptr(src), n, nil, dst)
}

// GetDevice is Get into n bytes of device memory at dst, its block held as for PutDevice.
func (t *Transfer) GetDevice(dst cuda.DevicePtr, n int, src Descriptor) error {
	return t.add(ucx.OpGet, uintptr(dst), n, nil, src)
}

func (t *Transfer) add(kind int32, addr uintptr, n int, buf []byte, d Descriptor) error {
	w := t.c.w
	switch {
	case t.started:
		return fmt.Errorf("%w: the transfer was started (Reset it once it is done)", ErrBusy)
	case t.c.gone.Load():
		return fmt.Errorf("%w: connection to %s", ErrClosed, t.c.remote)
	case d.IsZero():
		return fmt.Errorf("%w: the zero Descriptor", ErrDescriptor)
	case d.worker != t.c.peer:
		return fmt.Errorf("%w: a descriptor of worker %016x, on a connection to worker %016x", ErrDescriptor, d.worker, t.c.peer)
	case n <= 0 || uint64(n) > d.n:
		return fmt.Errorf("%w: %d bytes to or from a remote buffer of %d", ErrOutOfRange, n, d.n)
	}
	lr := w.lookup(addr, uintptr(n))
	if lr == nil {
		return fmt.Errorf("%w: local [%#x, +%d) lies in no registered region", ErrNotRegistered, addr, n)
	}
	var h localHold
	if buf != nil {
		if lr.reg.pool == nil {
			return fmt.Errorf("%w: local [%#x, +%d) is device memory: PutDevice, GetDevice", ErrNotRegistered, addr, n)
		}
		var err error
		if h.buf, err = lr.reg.pool.Hold(buf); err != nil {
			return fmt.Errorf("%w: %w", ErrNotRegistered, err)
		}
	} else {
		if lr.reg.heap == nil {
			return fmt.Errorf("%w: local [%#x, +%d) is host memory: Put, Get", ErrNotRegistered, addr, n)
		}
		var err error
		if h.dev, err = lr.reg.heap.Hold(cuda.DevicePtr(addr)); err != nil {
			return fmt.Errorf("%w: %w", ErrNotRegistered, err)
		}
		if off := addr - uintptr(h.dev.Block()); uintptr(n) > uintptr(h.dev.Size())-off {
			return errors.Join(fmt.Errorf("%w: local [%#x, +%d) runs past the end of device block %#x of %d bytes",
				ErrOutOfRange, addr, n, h.dev.Block(), h.dev.Size()), h.Release())
		}
	}
	// Held, the buffer (or block) is live and its region stays registered: look again, in case
	// it was freed and its region replaced since the first look (a free racing this call).
	if lr2 := w.lookup(addr, uintptr(n)); lr2 != lr {
		return errors.Join(fmt.Errorf("%w: local [%#x, +%d) changed region during the call", ErrNotRegistered, addr, n), h.Release())
	}
	// Copies queued on CUDA streams into or out of the buffer (a CUDAHost pool) come first, as
	// they would for a copy on another stream.
	if buf != nil {
		if err := lr.reg.pool.WaitStreams(buf); err != nil {
			return errors.Join(err, h.Release())
		}
	}
	t.ops = append(t.ops, ucx.Op{Mem: lr.mem, Local: uint64(addr), Remote: d.addr, Length: uint64(n), Kind: kind, MemType: int32(lr.reg.memType)})
	t.descs = append(t.descs, d)
	t.lrs = append(t.lrs, lr)
	t.holds = append(t.holds, h)
	t.gets = append(t.gets, kind == ucx.OpGet)
	t.puts = t.puts || kind == ucx.OpPut
	t.bytes += uint64(n)
	return nil
}

// Len returns the number of puts and gets added.
func (t *Transfer) Len() int { return len(t.holds) }

// Bytes returns the bytes the puts and gets added move.
func (t *Transfer) Bytes() int64 { return int64(t.bytes) }

// Start posts the transfer. Each remote key is unpacked once per peer region and kept; a
// descriptor whose region contradicts an earlier one is refused (ErrDescriptor) before
// anything is posted. The error, if any, is Wait's too.
func (t *Transfer) Start() error {
	w := t.c.w
	if len(t.descs) == 0 {
		return fmt.Errorf("%w: an empty transfer", ErrOutOfRange)
	}
	w.mu.Lock()
	if t.started {
		w.mu.Unlock()
		return fmt.Errorf("%w: the transfer was started already", ErrBusy)
	}
	t.started = true
	c := t.c
	switch {
	case w.closing:
		t.fail(fmt.Errorf("%w: the worker is closed", ErrClosed))
	case c.state != connOpen:
		t.fail(c.stateErr())
	}
	rma := t.err == nil && w.rmaMode(c)
	var copied, copiedBytes uint64
	var checked *localRegion // the last local region found registered: a batch's buffers share few
	for i := 0; i < len(t.descs) && t.err == nil; i++ {
		if lr := t.lrs[i]; lr != checked {
			if lr.reg.closed || lr.reg.regions[lr.base] != lr {
				t.fail(fmt.Errorf("%w: the registration of local region %d was closed", ErrClosed, lr.id))
				break
			}
			checked = lr
		}
		op, d := &t.ops[i], &t.descs[i]
		op.Ep = c.ep
		if w.opts.SharedMemory && op.MemType == ucx.MemoryHost && d.memType == memHost {
			p, err := c.direct(d)
			if err != nil {
				t.fail(err)
				break
			}
			if p != 0 { // the peer's segment is mapped here: one copy (direct.go), once all are checked
				t.use(c.rkeys[d.region])
				op.Kind, op.Remote = opCopied, uint64(p)
				copied++
				copiedBytes += op.Length
				continue
			}
		}
		if rma {
			e, rk, err := c.rkey(d)
			if err != nil {
				t.fail(err)
				break
			}
			t.use(e)
			op.Rkey = rk
			continue
		}
		if op.MemType != ucx.MemoryHost || d.memType != memHost {
			t.fail(fmt.Errorf("%w: device memory by message (this connection has no transport that moves it)", ErrNotSupported))
			break
		}
		if _, err := c.region(d); err != nil {
			t.fail(err)
			break
		}
		h := dataHeader{kind: dataPut, conn: c.peerID, addr: d.addr, n: op.Length, region: d.region, base: d.base, size: d.size}
		if t.gets[i] {
			h.kind = dataGet
			op.Length = 0 // a request: the bytes come in the answer, to op.Local
		}
		h.encode(&op.Header)
		op.Kind = ucx.OpData
		if op.Length > 0 && w.sendsByCopy(c) {
			op.Copy = 1
		}
	}
	if copied > 0 && t.err == nil { // a transfer refused at Start moves nothing
		t.copy() // out of mu, and back under it
		w.stats.ops.Add(copied)
		w.stats.copied.Add(copied)
		w.stats.bytes.Add(copiedBytes)
		t.dropCopied()
		switch { // ended while the copies went: those done count, the rest is refused
		case len(t.ops) == 0:
		case w.closing:
			t.fail(fmt.Errorf("%w: the worker is closed", ErrClosed))
		case c.state != connOpen:
			t.fail(c.stateErr())
		}
	}
	if t.err == nil && !rma {
		t.splitData()
	}
	if t.err == nil && t.puts && rma {
		t.ops = append(t.ops, ucx.Op{Ep: c.ep, Kind: ucx.OpFlush})
	}
	if t.err == nil {
		w.post(t)
		if t.posted < len(t.ops) && t.err == nil {
			w.queue = append(w.queue, t)
		}
	}
	end := t.completed()
	err := t.err
	if len(t.ops) > 0 { // posted or queued: progress's to complete (a transfer by copy has ended)
		w.signal()
	}
	w.mu.Unlock()
	if end {
		t.end(w)
	}
	return err
}

// opCopied marks an operation done by copy in Start (direct.go), its Remote then the address
// in this process of the peer's bytes.
const opCopied = -2

// dropCopied removes the operations done by copy, leaving those to post; their holds move
// after those of the operations left, which keep the index of their operation. Under mu.
func (t *Transfer) dropCopied() {
	k := 0
	t.puts = false
	for i := range t.ops {
		if t.ops[i].Kind == opCopied {
			continue
		}
		t.ops[k], t.descs[k], t.lrs[k], t.gets[k] = t.ops[i], t.descs[i], t.lrs[i], t.gets[i]
		t.holds[k], t.holds[i] = t.holds[i], t.holds[k] // every hold kept, released at the end, each at its operation's index
		t.puts = t.puts || !t.gets[k]
		k++
	}
	clear(t.descs[k:])
	clear(t.lrs[k:])
	t.ops, t.descs, t.lrs, t.gets = t.ops[:k], t.descs[:k], t.lrs[:k], t.gets[:k]
}

// completed reports whether t has ended and marks it so (once): none of its operations is in
// UCX's hands or copying, so the peer's keys it used are let go (forget.go). Under mu.
func (t *Transfer) completed() bool {
	if t.finishing || t.pending > 0 || t.err == nil && t.posted < len(t.ops) {
		return false
	}
	t.finishing = true
	t.c.w.unuse(t.c, t.rks)
	clear(t.rks)
	t.rks = t.rks[:0]
	return true
}

// fail records t's first error. Under mu.
func (t *Transfer) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// post posts as many of t's operations as there are slots for. Under mu.
func (w *Worker) post(t *Transfer) {
	for t.posted < len(t.ops) && t.err == nil {
		start, k := t.posted, 0
		for start+k < len(t.ops) {
			if w.windowFull(t, start+k) {
				break
			}
			i, ok := w.takeSlot(slotOp, t.c)
			if !ok {
				break
			}
			op, s := &t.ops[start+k], &w.slots[i]
			op.Slot = i
			s.t, s.c, s.n, s.op = t, t.c, op.Length, uint32(start+k)
			if j := start + k; j < len(t.lrs) {
				s.lr, s.part = t.lrs[j], j >= len(t.descs)
				if s.part {
					s.op = t.partOf[j-len(t.descs)]
				}
				if op.Kind == ucx.OpData {
					s.remote, s.get, s.data = true, t.gets[j], true
					t.c.dataOps++
					binary.LittleEndian.PutUint64(op.Header[16:], w.opID(i))
					if s.get { // the answer lands in place as UCX delivers it (ArmReply)
						s.local, s.n = uintptr(op.Local), binary.LittleEndian.Uint64(op.Header[32:])
						w.uw.ArmReply(i, w.opID(i), t.c.id, s.local, s.n)
						t.c.gets++
					}
				}
			}
			k++
		}
		if k == 0 {
			return
		}
		batch := t.ops[start : start+k]
		if _, err := w.uw.Post(batch); err != nil {
			for _, op := range batch {
				w.slots[op.Slot].dataEnded()
				w.freeSlot(op.Slot)
			}
			t.fail(wrap(ErrUCX, err))
			return
		}
		t.posted += k
		t.pending += k
		t.c.inflight += k
		for _, op := range batch {
			s := &w.slots[op.Slot]
			if s.lr != nil {
				s.lr.inflight++
			}
			s.sending = true
			if op.Status == 1 && s.lr != nil {
				s.held = true
				s.lr.held++
			}
			w.sent(op.Slot, op.Status)
		}
	}
}

// sent is the end of UCX's part of the operation in slot i: at once (st 0), in flight (1,
// from Post), or completed later with st (from Progress). The operation ends with it unless
// the target's answer is still due. Under mu.
func (w *Worker) sent(i uint32, st int32) {
	s := &w.slots[i]
	if st == 1 {
		return
	}
	s.sending = false
	if st != 0 {
		s.remote = false // the peer got nothing, or is gone: no answer comes
		if s.status == 0 {
			s.status = st
		}
	}
	if !s.remote {
		w.endOp(i)
	}
}

// endOp ends the operation in slot i and frees the slot. Under mu.
func (w *Worker) endOp(i uint32) {
	s := w.slots[i]
	s.dataEnded()
	kind := int32(ucx.OpFlush)
	if s.part {
		kind = opPart
	} else if s.lr != nil {
		kind = ucx.OpPut
	}
	w.freeSlot(i)
	w.opDone(s.t, s.lr, s.status, s.n, kind)
}

// countOp counts an operation of t that ended with status st. Under mu.
func (w *Worker) countOp(t *Transfer, st int32, n uint64, kind int32) {
	if st != 0 {
		t.fail(w.statusErr(t.c, st))
		return
	}
	if kind != ucx.OpFlush {
		if kind != opPart {
			w.stats.ops.Add(1)
		}
		w.stats.bytes.Add(n)
	}
}

// opPart is the kind opDone is told for a part of a split get or put (splitData): its bytes
// count, not as an operation.
const opPart = -1

// opDone is the completion of an operation of t, of n bytes on local region lr (nil for a
// flush). Under mu.
func (w *Worker) opDone(t *Transfer, lr *localRegion, st int32, n uint64, kind int32) {
	t.pending--
	t.c.inflight--
	if lr != nil {
		lr.inflight--
	}
	w.countOp(t, st, n, kind)
	if t.completed() {
		w.finished = append(w.finished, t)
	}
}

// zombieHold takes from t the hold of the local buffer of the operation in slot s, which an
// abandoned connection leaves in UCX's hands (abandonSlots), where UCX may still read or write
// the buffer for it: a put's (by message too) and a get's by UCX's gets. t's end then leaves it
// to the zombie slot. A get by message gives none (its request carries no bytes, and its
// answer is disarmed), nor a flush. An operation on device memory gives its block's hold (the
// device transports are UCX's RMA: device memory never goes by message). A put by message,
// whose parts (splitData) UCX may hold in several slots, gives a hold they share, released
// once UCX has let go of the last (unshare). Under mu.
func (t *Transfer) zombieHold(s *slot) (localHold, *sharedHold) {
	if s.lr == nil || s.get || int(s.op) >= len(t.holds) {
		return localHold{}, nil
	}
	if !s.data {
		h := t.holds[s.op]
		t.holds[s.op] = localHold{}
		return h, nil
	}
	sh := t.shares[s.op]
	if sh == nil {
		if t.shares == nil {
			t.shares = map[uint32]*sharedHold{}
		}
		sh = &sharedHold{hold: t.holds[s.op]}
		t.holds[s.op] = localHold{}
		t.shares[s.op] = sh
	}
	sh.users++
	return localHold{}, sh
}

// sharedHold is the hold of a put by message's buffer that the zombie slots of its parts share
// (zombieHold).
type sharedHold struct {
	hold  localHold
	users int // the zombie slots that share it
}

// unshare lets go of a zombie slot's share of sh (nil: none): the hold is released with the
// last. Under mu.
func (w *Worker) unshare(sh *sharedHold) {
	if sh == nil {
		return
	}
	if sh.users--; sh.users == 0 {
		w.unhold(sh.hold)
		sh.hold = localHold{}
	}
}

// postQueued posts the queued transfers' operations while slots are free, and drops the
// queued transfers that failed. Under mu.
func (w *Worker) postQueued() {
	kept := w.queue[:0]
	for _, t := range w.queue {
		if t.err == nil {
			w.post(t)
		}
		if t.err == nil && t.posted < len(t.ops) {
			kept = append(kept, t)
			continue
		}
		if t.completed() {
			w.finished = append(w.finished, t)
		}
	}
	clear(w.queue[len(kept):])
	w.queue = kept
}

// end releases t's holds (which may free buffers freed meanwhile) and wakes its waiters. Not
// under mu.
func (t *Transfer) end(w *Worker) {
	for i, h := range t.holds {
		if h != (localHold{}) {
			if err := h.Release(); err != nil {
				w.stats.freeErrs.Add(1)
				w.logf("remote: a free deferred by a transfer failed: %v", err)
			}
			t.holds[i] = localHold{}
		}
	}
	w.stats.transfers.Add(1)
	if t.err != nil {
		w.stats.failed.Add(1)
	}
	close(t.done)
}

// Done returns a channel closed when the transfer has ended, successfully or not (Err).
func (t *Transfer) Done() <-chan struct{} { return t.done }

// Err returns the transfer's error once Done is closed: the first operation's that failed,
// or nil.
func (t *Transfer) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Wait waits until the transfer has ended, or ctx has (ctx.Err(): the transfer goes on, and
// its buffers stay held until it ends), and returns its error.
func (t *Transfer) Wait(ctx context.Context) error {
	if !t.started {
		return fmt.Errorf("%w: the transfer was not started", ErrBusy)
	}
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reset empties the transfer for reuse, once it has ended (ErrBusy before); a transfer never
// started gives its buffers' holds back.
func (t *Transfer) Reset() error {
	if t.started {
		select {
		case <-t.done:
		default:
			return fmt.Errorf("%w: the transfer has not ended", ErrBusy)
		}
	}
	var errs []error
	for _, h := range t.holds {
		if h != (localHold{}) {
			errs = append(errs, h.Release())
		}
	}
	clear(t.holds)
	clear(t.descs)
	clear(t.lrs)
	t.ops, t.descs, t.lrs, t.holds, t.gets = t.ops[:0], t.descs[:0], t.lrs[:0], t.holds[:0], t.gets[:0]
	t.partOf, t.shares = t.partOf[:0], nil
	t.puts, t.bytes, t.started, t.finishing, t.posted, t.pending, t.err = false, 0, false, false, 0, 0, nil
	t.done = make(chan struct{})
	return errors.Join(errs...)
}

// Put puts src to dst and waits for it: a Transfer of one put.
func (c *Conn) Put(ctx context.Context, src []byte, dst Descriptor) error {
	return c.one(ctx, (*Transfer).Put, src, dst)
}

// Get gets len(dst) bytes of src into dst and waits for it: a Transfer of one get.
func (c *Conn) Get(ctx context.Context, dst []byte, src Descriptor) error {
	return c.one(ctx, (*Transfer).Get, dst, src)
}

// one runs a transfer of one operation, added by add, and waits for it. The transfer is
// reused from spares once it has ended, so a Put or Get allocates only its channel; one left
// in flight by ctx is not (its buffer stays held until it ends).
func (c *Conn) one(ctx context.Context, add func(*Transfer, []byte, Descriptor) error, b []byte, d Descriptor) error {
	t, _ := spares.Get().(*Transfer)
	if t == nil {
		t = c.NewTransfer()
	}
	t.c = c
	if err := add(t, b, d); err != nil { // nothing added
		t.c = nil
		spares.Put(t)
		return err
	}
	err := t.Start()
	if err == nil {
		err = t.Wait(ctx)
	}
	select {
	case <-t.done:
		if t.Reset() == nil {
			t.c = nil
			spares.Put(t)
		}
	default: // left in flight: its end releases its hold
	}
	return err
}

// spares are the ended transfers of Conn.Put and Get, for the next.
var spares sync.Pool
