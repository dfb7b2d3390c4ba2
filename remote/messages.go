package remote

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// Transfers by message.
//
// Where UCX has no transport that does puts and gets itself for a connection (no RDMA NIC, no
// zero-copy shared memory: TCP), it emulates them with messages, and UCX 1.13's emulation
// ends the process that is the target of a put or a get with ucs_fatal ("unexpected error")
// when the peer dies while it answers. A transfer on such a connection therefore goes as
// messages of this package, eagerly (UCX sends every byte at once and keeps nothing of a
// message on either side once it is delivered), which UCX's failure handling covers: a put
// is a message carrying the bytes (several, of putPart bytes at most), which the target
// checks against its own registered regions, copies into place and acknowledges; a get is a
// request the target checks and answers with the bytes. So the target writes only into its
// registered regions, within a live buffer of their pools (what a descriptor it issued can
// name), whatever a peer sends; and the transfer completes when every acknowledgement and
// answer has come, the bytes in place.
//
// A connection chooses at its first transfer: puts and gets of UCX where ucp_ep_print_info
// lists RMA protocols ("put[i]") and a lane on a transport that does them in registered memory
// (rmaLanes: an RDMA NIC's), messages otherwise (TCP; shared memory, whose sysv and posix puts
// reach only memory UCX allocated itself, so that UCX would emulate them into a pool's
// regions with its own messages); Options.Mode forces one.
//
// A get by message is split into requests of getPart bytes, getWindow of them in flight at most on
// a connection, and the answer to each is copied by UCX's callback straight into place
// (ucx.Worker.ArmReply): one copy from UCX's receive buffer, as UCX's own emulated get makes, where
// a whole answer would be assembled by UCX in a buffer it allocates, queued, then copied.
//
// A data message's header (ucx.HeaderLen bytes, little-endian): kind, status, six zero bytes,
// the receiver's connection id, the initiator's operation id (slot and generation), the
// address at the target, the length, the region's id at the target, four zero bytes, and the
// region's base and size as the descriptor has them, which the target checks too.

const (
	dataPut   = 1 // the bytes to write at address: the target answers dataDone or dataDones
	dataGet   = 2 // a request for length bytes at address: the target answers dataReply
	dataReply = 3 // the bytes asked for
	dataDone  = 4 // the put is in place, or was refused (the status says)
	dataDones = 5 // several puts are in place: their operation ids (see doneMax)
)

// Acknowledging puts in batches. The puts a target places in one progress round, for one
// connection, are acknowledged together: a dataDones message names up to doneMax of their
// operation ids in its header, where the fields of a single answer are (the second byte is the
// status, always answerOK, the third the count; the connection id stays in its place; the six
// words from byte 16 are the ids, the unused ones zero). A refused put still gets a dataDone
// of its own, with the status. Over TCP each answer was a send, a receive and often a wakeup
// on each side: one per put of a batch of many small blocks.
const doneMax = 6

// Statuses of an answer.
const (
	answerOK        = 0
	answerRefused   = 1 // no such region, or a range outside it
	answerMemType   = 2 // device memory, which a message cannot reach
	answerTruncated = 3 // the bytes are not the length the header says, or could not be fetched
	answerBusy      = 4 // no slot to fetch the bytes with: the sender's MaxInFlight exceeds the target's
)

// Mode is how a connection's transfers move bytes.
type Mode uint8

const (
	// ModeAuto: UCX's puts and gets where a lane of the connection does them in registered
	// memory (an RDMA NIC), messages otherwise (ModeMessages): over TCP, and over shared memory,
	// whose transports in UCX 1.13 do puts and gets only in memory UCX allocated itself.
	ModeAuto Mode = iota
	// ModeRMA: UCX's puts and gets (ucp_put_nbx, ucp_get_nbx), emulated by UCX where no
	// transport has them. On UCX 1.13, a peer that dies while this process answers its
	// emulated put or get ends this process (ucs_fatal): for tests and benchmarks.
	ModeRMA
	// ModeMessages: messages of this package, checked and placed by the target.
	ModeMessages
)

// dataHeader is a data message's header, decoded.
type dataHeader struct {
	kind, status uint8
	conn, op     uint64
	addr, n      uint64
	region       uint32
	base, size   uint64
}

func (h dataHeader) encode(b *[ucx.HeaderLen]byte) {
	*b = [ucx.HeaderLen]byte{}
	b[0], b[1] = h.kind, h.status
	binary.LittleEndian.PutUint64(b[8:], h.conn)
	binary.LittleEndian.PutUint64(b[16:], h.op)
	binary.LittleEndian.PutUint64(b[24:], h.addr)
	binary.LittleEndian.PutUint64(b[32:], h.n)
	binary.LittleEndian.PutUint32(b[40:], h.region)
	binary.LittleEndian.PutUint64(b[48:], h.base)
	binary.LittleEndian.PutUint64(b[56:], h.size)
}

// encodeDones writes a dataDones header for the peer's connection conn naming ids (1 to
// doneMax of them).
func encodeDones(b *[ucx.HeaderLen]byte, conn uint64, ids []uint64) {
	*b = [ucx.HeaderLen]byte{}
	b[0], b[1], b[2] = dataDones, answerOK, uint8(len(ids))
	binary.LittleEndian.PutUint64(b[8:], conn)
	for i, id := range ids {
		binary.LittleEndian.PutUint64(b[16+8*i:], id)
	}
}

// decodeDones reads a dataDones header: the connection it is for and the ids it names. ok is
// false unless the kind, the status, the count (1 to doneMax) and every byte the header does
// not use (zero) are as encodeDones writes them.
func decodeDones(b *[ucx.HeaderLen]byte) (conn uint64, ids [doneMax]uint64, n int, ok bool) {
	n = int(b[2])
	if b[0] != dataDones || b[1] != answerOK || n < 1 || n > doneMax {
		return 0, ids, 0, false
	}
	for _, x := range b[3:8] {
		if x != 0 {
			return 0, ids, 0, false
		}
	}
	for i := range doneMax {
		ids[i] = binary.LittleEndian.Uint64(b[16+8*i:])
		if i >= n && ids[i] != 0 {
			return 0, ids, 0, false
		}
	}
	return binary.LittleEndian.Uint64(b[8:]), ids, n, true
}

func decodeHeader(b *[ucx.HeaderLen]byte) (dataHeader, bool) {
	for _, i := range [...]int{2, 3, 4, 5, 6, 7, 44, 45, 46, 47} {
		if b[i] != 0 {
			return dataHeader{}, false
		}
	}
	return dataHeader{kind: b[0], status: b[1], conn: binary.LittleEndian.Uint64(b[8:]), op: binary.LittleEndian.Uint64(b[16:]),
		addr: binary.LittleEndian.Uint64(b[24:]), n: binary.LittleEndian.Uint64(b[32:]), region: binary.LittleEndian.Uint32(b[40:]),
		base: binary.LittleEndian.Uint64(b[48:]), size: binary.LittleEndian.Uint64(b[56:])}, true
}

var (
	rmaProto = regexp.MustCompile(`(?m)^#\s+(put|get)\[\d+\]:`)
	epLane   = regexp.MustCompile(`(?m)^#\s+lane\[\d+\]:\s+\d+:([A-Za-z0-9_]+)/`)
)

// allocOnly are the transports whose puts and gets reach only memory UCX allocated itself
// (ucp_mem_map with UCP_MEM_MAP_ALLOCATE: a shared segment the peer maps); their memory
// domains register nothing else, so a pool's regions carry no key of theirs and UCX emulates
// puts and gets into them with messages (ucx_info -d: "allocate", no "register"). tcp, cma
// and knem carry no puts or gets of UCX 1.13's at all (only its rendezvous).
var allocOnly = map[string]bool{"self": true, "sysv": true, "posix": true, "tcp": true, "cma": true, "knem": true}

// rmaLanes reports whether an endpoint, as ucp_ep_print_info describes it, has puts and gets
// (put[i], get[i] lines) and a lane on a transport that does them in registered memory (an
// RDMA NIC's, xpmem).
func rmaLanes(info string) bool {
	if !rmaProto.MatchString(info) {
		return false
	}
	for _, m := range epLane.FindAllStringSubmatch(info, -1) {
		if !allocOnly[m[1]] {
			return true
		}
	}
	return false
}

// rmaMode reports whether c's transfers go as UCX's puts and gets. Under mu.
func (w *Worker) rmaMode(c *Conn) bool {
	if c.mode == ModeAuto {
		c.mode = w.opts.Mode
		if c.mode == ModeAuto {
			c.mode = ModeMessages
			if info, err := w.uw.EpInfo(c.ep); err == nil && rmaLanes(info) {
				c.mode = ModeRMA
			}
		}
	}
	return c.mode == ModeRMA
}

// What sendsByCopy knows of a connection's sends (Conn.copies).
const (
	copiesUnknown = iota // not asked yet
	copiesNot
	copiesYes
)

// sendsByCopy reports whether c's messages with bytes go by copy (ucx.Op.Copy): where one of
// its endpoint's lanes is UCX's tcp, whose zero-copy sends abort the process when the socket
// fails under one (package ucx, "Sends by copy"). A message then goes copied into tcp's send
// segments (64 KiB, as the loader sets them), as it goes over shared memory. Until c is open and its endpoint names its lanes, it
// answers yes without keeping the answer. Under mu.
func (w *Worker) sendsByCopy(c *Conn) bool {
	if c.copies == copiesUnknown {
		if c.state != connOpen {
			return true // its lanes may not be set up yet: the safe way, asked again later
		}
		info, err := w.uw.EpInfo(c.ep)
		lanes := epLane.FindAllStringSubmatch(info, -1)
		if err != nil || len(lanes) == 0 {
			return true
		}
		c.copies = copiesNot
		for _, m := range lanes {
			if m[1] == "tcp" {
				c.copies = copiesYes
			}
		}
	}
	return c.copies == copiesYes
}

// A data message always goes eagerly (ucx.OpData), and one that comes by UCX's rendezvous is
// refused, never fetched: UCX 1.13 ends the process whose rendezvous fetch fails, by cma over
// shared memory (process_vm_readv of a peer that exited: "No such process", TestPeerKilled/shm
// found it), as its emulated puts and gets end a target whose peer dies while it answers.

// getPart is the most a get by eager message asks for in one request: its answer then comes
// in one fragment of UCX's TCP transport (64 KiB), which the callback copies straight into
// place (ArmReply), where a larger one is first assembled whole by UCX in a buffer it
// allocates, then copied. The parts of a large get are in flight together (getWindow). A target
// fails the connection of a peer whose get asks for more (dataKept): one request of 64 bytes
// made it send a whole buffer of any size.
const getPart = 32 << 10

// putPart is the most bytes a put by message carries in one message: a larger put is split in
// parts of putPart bytes (splitData), each placed and acknowledged as a put of its own, and a
// target fails the connection of a peer that sends a longer data message (dataMax), which UCX's
// callback gives back at once, neither kept nor copied (ucx.Worker.LimitData). A put was one
// eager message of any length, which UCX assembled whole and the target kept until its bytes
// were placed: up to maxQueuedAnswers of them a connection, of whatever size a peer liked. A
// part, like a get's answer (getPart), comes in one fragment of UCX's TCP transport, which UCX
// hands over in its receive buffer, unassembled: puts of 1 and 16 MiB over TCP went 1.5 to 2
// times as fast in parts of 32 to 60 KiB as in one message, and no faster in parts of 64 KiB
// or more (docs/ucx.md). An eager message is assembled whole by UCX before its callback sees
// its length: a longer one still takes its bytes in UCX's buffer until then, once, failing its
// connection.
const putPart = getPart

// dataMax is the most bytes a data message of a peer's may carry: a put's part, or the answer
// to a get's request (getPart). Changed within protocol version 2, which no release has had.
const dataMax = max(putPart, getPart)

// getWindow bounds the gets by message in flight on a connection, parts of split gets included
// (4 MiB of answers at getPart bytes): the transfer's next operations wait for earlier ones. A
// window of thousands (Options.MaxInFlight's default) halved the rate of gets over TCP on the
// build machine, where 128 kept it (docs/bench.md), as ucx_perftest keeps 64 outstanding.
const getWindow = 128

// dataWindow bounds the puts and gets by message in flight on a connection, parts of split ones
// included: Options.MaxInFlight's default. Each is answered once by the target, which queues
// the answers it cannot send yet (a peer that does not read them); the window is what bounds
// that queue for an honest peer (maxQueuedAnswers), where MaxInFlight (1<<20 at most) let
// one connection queue a million answers, some 220 MiB.
const dataWindow = defaultInFlight

// windowFull reports whether operation j of t is a put or get by message that must wait: its
// connection has dataWindow of them in flight, or, a get, getWindow gets. Under mu.
func (w *Worker) windowFull(t *Transfer, j int) bool {
	if t.ops[j].Kind != ucx.OpData || j >= len(t.gets) {
		return false
	}
	return t.c.dataOps >= dataWindow || t.gets[j] && t.c.gets >= getWindow
}

// dataEnded uncounts the put or get by message of slot s from its connection's windows. Under
// mu.
func (s *slot) dataEnded() {
	if s.get {
		s.c.gets--
	}
	if s.data {
		s.c.dataOps--
	}
}

// splitData splits each get by eager message of more than getPart bytes into requests of
// getPart bytes, and each put of more than w.putPart bytes (putPart) into messages of as many:
// the first stays where it is, the others go after every operation of the transfer (ops, lrs,
// gets and partOf beyond len(descs): parts, not counted as operations of their own). Under mu.
func (t *Transfer) splitData() {
	for i := range t.descs {
		if t.ops[i].Kind != ucx.OpData {
			continue
		}
		part := t.c.w.putPart
		if t.gets[i] {
			part = getPart
		}
		h, _ := decodeHeader(&t.ops[i].Header)
		if h.n <= part {
			continue
		}
		for off := part; off < h.n; off += part {
			p, ph := t.ops[i], h
			ph.addr, ph.n = h.addr+off, min(part, h.n-off)
			p.Local += off
			if !t.gets[i] {
				p.Length = ph.n // a put's part carries its bytes (a get's request none)
			}
			ph.encode(&p.Header)
			t.ops = append(t.ops, p)
			t.lrs = append(t.lrs, t.lrs[i])
			t.gets = append(t.gets, t.gets[i])
			t.partOf = append(t.partOf, uint32(i))
		}
		h.n = part
		h.encode(&t.ops[i].Header)
		if !t.gets[i] {
			t.ops[i].Length = part
		}
	}
}

// opID is the id of the operation in slot i, as a data message names it.
func (w *Worker) opID(i uint32) uint64 { return uint64(w.slots[i].gen)<<32 | uint64(i) }

// data handles a data message. Under mu.
func (w *Worker) data(ev *ucx.Event) {
	if w.dataKept(ev) {
		return // a put whose bytes are copied once its buffer is held (holdAnswers)
	}
	w.uw.ReleaseData(ev.Key)
}

// dataKept handles a data message, and reports whether its bytes are kept (a put's, until its
// buffer is held). Under mu.
func (w *Worker) dataKept(ev *ucx.Event) bool {
	if ev.Oversize { // given back to UCX by its callback (dataMax): fails the connection it names
		if c := w.conns[binary.LittleEndian.Uint64(ev.Header[8:])]; c != nil && c.state == connOpen {
			w.failConn(c, fmt.Errorf("%w: %s sent a data message of %d bytes, beyond the %d this "+
				"worker takes", ErrProtocol, c.remote, ev.Len, dataMax))
		}
		return false
	}
	if ev.Header[0] == dataDones {
		w.dones(ev)
		return false
	}
	h, ok := decodeHeader(&ev.Header)
	if !ok {
		return false
	}
	c := w.conns[h.conn]
	if c == nil || c.state != connOpen {
		return false // for a connection gone: the peer's transfer failed with it
	}
	switch h.kind {
	case dataPut:
		st := w.checkTarget(h)
		if st == answerOK && uint64(ev.Len) != h.n {
			st = answerTruncated
		}
		if st == answerOK && ev.Rndv {
			st = answerTruncated // by rendezvous: refused, never fetched (above)
		}
		if st != answerOK {
			w.answer(c, dataHeader{kind: dataDone, status: st, op: h.op})
			break
		}
		return w.targetHeld(c, h, w.byID[h.region], ev.Key)
	case dataGet:
		if h.n > w.getMax { // an honest peer splits longer gets (splitData)
			w.failConn(c, fmt.Errorf("%w: %s asked for %d bytes in one get, beyond the %d "+
				"this worker answers", ErrProtocol, c.remote, h.n, w.getMax))
			break
		}
		st := w.checkTarget(h)
		reply := dataHeader{kind: dataReply, status: st, op: h.op, addr: h.addr, n: h.n}
		if st != answerOK {
			w.answer(c, reply)
			break
		}
		w.targetHeld(c, reply, w.byID[h.region], 0)
	case dataReply, dataDone:
		w.answered(c, h, ev)
	}
	return false
}

// dones takes a dataDones: each id it names is checked and ended as a dataDone's. A message
// whose header is not one encodeDones writes, or that carries bytes, is dropped whole. Under
// mu.
func (w *Worker) dones(ev *ucx.Event) {
	conn, ids, n, ok := decodeDones(&ev.Header)
	c := w.conns[conn]
	if !ok || ev.Len != 0 || ev.Rndv || c == nil || c.state != connOpen {
		return
	}
	for _, id := range ids[:n] {
		w.answered(c, dataHeader{kind: dataDone, status: answerOK, op: id}, ev)
	}
}

// ackLater queues the acknowledgement of put op, in place, for c's peer: sent with the others
// of c once doneMax are queued, else at the end of the progress round (sendAcks). Under mu.
func (w *Worker) ackLater(c *Conn, op uint64) {
	if !c.acking {
		c.acking = true
		w.acking = append(w.acking, c)
	}
	c.acks = append(c.acks, op)
	if len(c.acks) == doneMax {
		w.sendDones(c)
	}
}

// sendAcks sends the acknowledgements the round queued. Under mu.
func (w *Worker) sendAcks() {
	for i, c := range w.acking {
		if len(c.acks) > 0 && c.state == connOpen {
			w.sendDones(c) // a connection gone meanwhile: the peer's transfers failed with it
		}
		c.acks, c.acking = c.acks[:0], false
		w.acking[i] = nil
	}
	w.acking = w.acking[:0]
}

// sendDones sends (or queues) a dataDones naming c's queued acknowledgements. Under mu.
func (w *Worker) sendDones(c *Conn) {
	op := ucx.Op{Ep: c.ep, Kind: ucx.OpData}
	encodeDones(&op.Header, c.peerID, c.acks)
	c.acks = c.acks[:0]
	w.postAnswer(c, op, nil, localHold{})
}

// checkTarget checks that [h.addr, h.addr+h.n) lies in host memory of region h.region of this
// worker, which has the base and size the header says, inside one live buffer of the region's
// pool: what a descriptor of it can name. A region is mostly address space its pool has not
// committed (PROT_NONE), or has decommitted, and free memory the pool hands out next: a range
// there is refused, not copied into (SIGSEGV) or sent from. Under mu.
func (w *Worker) checkTarget(h dataHeader) uint8 {
	lr := w.byID[h.region]
	switch {
	case lr == nil || h.base != uint64(lr.base) || h.size != uint64(lr.size):
		return answerRefused
	case !inRange(h.addr, h.n, uint64(lr.base), uint64(lr.size)):
		return answerRefused
	case lr.reg.memType != ucx.MemoryHost:
		return answerMemType
	case !liveIn(lr, h.addr, h.n):
		return answerRefused
	}
	return answerOK
}

// inRange reports whether [addr, addr+n), n > 0, lies in [base, base+size), a range that does
// not wrap around, whatever addr and n are: an addr past the end is refused before end-addr is
// taken, which would wrap around and pass any length.
func inRange(addr, n, base, size uint64) bool {
	end := base + size
	return n > 0 && addr >= base && addr <= end && n <= end-addr
}

// liveIn reports whether [addr, addr+n), inside region lr, lies in one live buffer of lr's pool:
// committed memory, which stays so while the buffer is live (its owner frees it once the peer is
// done with it). A lookup: no lock, no allocation. Under mu, which keeps lr registered and its
// pool's memory mapped (the pool's release deregisters it first).
func liveIn(lr *localRegion, addr, n uint64) bool {
	return lr.reg.pool != nil && lr.reg.pool.Live(mem.Bytes(uintptr(addr), uintptr(n))) == nil
}

// answer sends a done, or a refusal, to c's peer, or queues it until a slot is free (a get's
// answer with bytes goes by answerHeld). Under mu.
func (w *Worker) answer(c *Conn, h dataHeader) {
	h.conn = c.peerID
	op := ucx.Op{Ep: c.ep, Kind: ucx.OpData}
	h.encode(&op.Header)
	w.postAnswer(c, op, nil, localHold{})
}

// postAnswer sends answer op to c's peer, or queues it until a slot is free. An answer with the
// bytes of region lr comes with the hold of their buffer (holdAnswers), which it keeps until UCX
// has sent them. Under mu.
func (w *Worker) postAnswer(c *Conn, op ucx.Op, lr *localRegion, hold localHold) {
	w.stats.answers.Add(1)
	i, ok := w.takeSlot(slotAnswer, c)
	if !ok {
		if !w.answerQueued(c) {
			w.unhold(hold)
			return
		}
		w.queueAnswer(c, pendingAnswer{c: c, op: op, lr: lr, hold: hold})
		return
	}
	w.sendAnswer(c, i, op, lr, hold)
}

// queueAnswer queues answer a to c's peer until a slot is free for it (postAnswers), reusing
// the room of the answers sent before it once they are half the queue, so that a queue that
// never empties does not grow for them. Under mu.
func (w *Worker) queueAnswer(c *Conn, a pendingAnswer) {
	if len(c.answers) == cap(c.answers) && c.answerHead > 0 && c.answerHead >= len(c.answers)/2 {
		n := copy(c.answers, c.answers[c.answerHead:])
		clear(c.answers[n:])
		c.answers, c.answerHead = c.answers[:n], 0
	}
	c.answers = append(c.answers, a)
	if !c.answerWait {
		c.answerWait = true
		w.answers = append(w.answers, c)
	}
}

// dropAnswers drops the answers to c's peer waiting for a slot, whose connection ended: none
// will be sent. c leaves w.answers at postAnswers' next pass. Under mu.
func (w *Worker) dropAnswers(c *Conn) {
	for _, a := range c.answers[c.answerHead:] {
		w.unhold(a.hold)
	}
	c.answering -= len(c.answers) - c.answerHead
	w.answering -= len(c.answers) - c.answerHead
	clear(c.answers)
	c.answers, c.answerHead = nil, 0
}

// answerQueued counts an answer to c's peer that waits (for a slot, or for its buffer's hold),
// or fails c when its peer has more waiting than an honest one can (maxQueuedAnswers), or when
// the worker's connections have answersWorker waiting and c has the most (answerRoom), and
// reports which. Under mu.
func (w *Worker) answerQueued(c *Conn) bool {
	if c.answering >= w.answerBound {
		w.failConn(c, fmt.Errorf("%w: %s sent more than %d data messages this worker could not answer yet",
			ErrProtocol, c.remote, w.answerBound))
		return false
	}
	if w.answering >= w.answersBound && !w.answerRoom(c) {
		return false
	}
	c.answering++
	w.answering++
	return true
}

// maxQueuedAnswers bounds a connection's answers waiting for a slot (w.answers) or for their
// buffer's hold (w.unheld): an answer not yet sent is due to an operation still in flight at
// the peer, and an honest peer has dataWindow of them in flight on a connection at most, each
// answered once; a peer that sends more, while it does not read the answers (which keeps the
// answer slots in flight), would grow the queue without bound. Some 900 KiB of queue at most.
const maxQueuedAnswers = dataWindow

// keptAnswers is the room a connection's queue of answers keeps once empty (postAnswers): a
// window of gets and more, so that the queue of an honest peer allocates once.
const keptAnswers = 1024

type pendingAnswer struct {
	c    *Conn
	op   ucx.Op
	lr   *localRegion
	hold localHold // a get's answer: its buffer held until UCX has sent it (holdAnswers)

	// put says it is a put waiting for its buffer's hold (in w.unheld), its bytes in data
	// message key: op is then its refusal, with the range the hold takes.
	put bool
	key uint64
}

func (w *Worker) sendAnswer(c *Conn, i uint32, op ucx.Op, lr *localRegion, hold localHold) {
	op.Slot = i
	w.slots[i].c = c
	ops := [1]ucx.Op{op}
	if _, err := w.uw.Post(ops[:]); err != nil || ops[0].Status != 1 {
		w.freeSlot(i) // sent at once, or refused: the peer's transfer fails with the connection
		w.unhold(hold)
		return
	}
	c.inflight++
	if lr != nil {
		w.slots[i].lr, w.slots[i].held = lr, true
		lr.held++
	}
	w.slots[i].hold = hold
	if w.opts.AnswerTimeout > 0 {
		w.timeAnswer(i)
	}
}

// timeAnswer notes that the answer in slot i went in flight now, and puts it last in the list
// of the answers timed by AnswerTimeout: the list is in the order the answers went in flight,
// which is their deadlines' (one limit for all), so a check looks at those due and the first
// that is not (expireAnswers). O(1), no allocation. Under mu.
func (w *Worker) timeAnswer(i uint32) {
	s := &w.slots[i]
	s.posted, s.timed, s.prevTimed, s.nextTimed = time.Since(w.born), true, w.timedTail, 0
	if w.timedTail != 0 {
		w.slots[w.timedTail-1].nextTimed = i + 1
	} else {
		w.timedHead = i + 1
	}
	w.timedTail = i + 1
}

// untimeAnswer takes the answer in slot i out of the list of timed answers (timeAnswer): it
// ended, or its connection failed. O(1). Under mu.
func (w *Worker) untimeAnswer(i uint32) {
	s := &w.slots[i]
	if s.prevTimed != 0 {
		w.slots[s.prevTimed-1].nextTimed = s.nextTimed
	} else {
		w.timedHead = s.nextTimed
	}
	if s.nextTimed != 0 {
		w.slots[s.nextTimed-1].prevTimed = s.prevTimed
	} else {
		w.timedTail = s.prevTimed
	}
	s.timed, s.prevTimed, s.nextTimed = false, 0, 0
}

// expireAnswers fails the connections with an answer in flight for Options.AnswerTimeout or
// longer: their peer does not take it, and the forced close of the endpoint ends the send,
// which releases the hold of its buffer. It looks at the answers due, oldest first, and the
// first that is not (timeAnswer): each due leaves the list, so it is looked at once, and an idle
// worker's check costs nothing, whatever MaxInFlight is. Under mu, by the progress goroutine.
func (w *Worker) expireAnswers(now time.Time) {
	limit := w.opts.AnswerTimeout
	if limit <= 0 || w.timedHead == 0 || now.Sub(w.answersSeen) < min(limit/4, idleTick) {
		return
	}
	w.answersSeen = now
	since := now.Sub(w.born)
	for w.timedHead != 0 {
		i := w.timedHead - 1
		s := &w.slots[i]
		w.answerVisits++
		if since-s.posted < limit {
			return // the answers after it went in flight later
		}
		w.untimeAnswer(i)
		if s.c.state == connOpen {
			w.failConn(s.c, fmt.Errorf("%w: %s did not take this worker's answer within %v (AnswerTimeout)",
				ErrPeer, s.c.remote, limit))
		}
	}
}

// Puts and answers to gets hold their buffers. UCX sends an answer's bytes from the buffer the
// get names until the send completes, which a peer that stops reading puts off as long as it
// likes (zero-copy over TCP, or a send waiting in UCX's queue). The buffer freed meanwhile, its
// memory decommitted or its pool closed (unmapped), UCX's send read memory that was gone: EFAULT,
// and UCX 1.13 aborted the process. A put's copy is short, but its buffer freed and trimmed
// between the check of its range and the copy left the copy to fault too. So the target holds
// the buffer in its pool (pinned.Pool.Hold), as a transfer holds its local buffers: a put's from
// the check to the copy, an answer's from before it is posted until UCX has sent it; a free
// meanwhile takes effect then, and the pool keeps its memory. The hold is a call into the pool,
// made with the worker's mutex let go (the lock order: a pool, then the worker): data queues
// the put or the answer (targetHeld), the progress goroutine holds its buffer after its round
// (holdAnswers), then copies the put's bytes or posts the answer, refused without bytes where
// the buffer went meanwhile. The holds are released out of the mutex too (unhold,
// releaseHolds).

// targetHeld queues what c's peer asked of a range of region lr that checkTarget accepted until
// the range's buffer is held (holdAnswers): the answer to a get (h, a dataReply), or the copy
// of a put's bytes (h, the put's header; key, its data message, kept until then) and its
// acknowledgement. It reports whether a data message was kept. Under mu.
func (w *Worker) targetHeld(c *Conn, h dataHeader, lr *localRegion, key uint64) bool {
	if !w.answerQueued(c) {
		return false
	}
	a := pendingAnswer{c: c, lr: lr, key: key, put: h.kind == dataPut}
	a.op = ucx.Op{Ep: c.ep, Kind: ucx.OpData, Local: h.addr, Length: h.n, Mem: lr.mem}
	if w.sendsByCopy(c) {
		a.op.Copy = 1
	}
	if a.put {
		h = dataHeader{kind: dataDone, op: h.op} // its refusal, if it comes to that
	}
	h.conn = c.peerID
	h.encode(&a.op.Header)
	w.unheld = append(w.unheld, a)
	if a.put {
		c.putsIn++ // the peer's messages from now on wait for it (queuedMsg)
	}
	return a.put
}

// takeUnheld returns the answers waiting for their buffer's hold, for holdAnswers. Under mu, by
// the progress goroutine.
func (w *Worker) takeUnheld() []pendingAnswer {
	if len(w.unheld) == 0 {
		return nil
	}
	batch := w.unheld
	w.unheld, w.unheldSpare = w.unheldSpare, nil
	for _, a := range batch {
		a.c.answering-- // out of the queue; counted again if it waits for a slot
		w.answering--
	}
	return batch
}

// holdAnswers holds the buffers of batch (takeUnheld) with the mutex let go, then copies the
// puts' bytes into place and acknowledges them, and posts the gets' answers, holding their
// buffers until sent; those whose buffer could not be held (freed meanwhile), or whose region
// was deregistered meanwhile, are refused, without bytes. By the progress goroutine, not under
// mu.
func (w *Worker) holdAnswers(batch []pendingAnswer) {
	for i := range batch {
		a := &batch[i]
		if h, err := a.lr.reg.pool.Hold(mem.Bytes(uintptr(a.op.Local), uintptr(a.op.Length))); err == nil {
			a.hold = localHold{buf: h}
		}
	}
	if w.targetHook != nil {
		w.targetHook()
	}
	w.mu.Lock()
	for _, a := range batch {
		switch {
		case a.c.state != connOpen:
			w.unhold(a.hold) // its peer's transfer failed with the connection
		case a.hold == (localHold{}) || w.byID[a.lr.id] != a.lr:
			// Deregistered meanwhile (Registration.Close): checked here, under mu after the
			// hold, which Unmapping takes too, so nothing lands once Close has returned.
			w.unhold(a.hold)
			refuseAnswer(&a.op)
			w.postAnswer(a.c, a.op, nil, localHold{})
		case a.put:
			w.uw.CopyData(a.key, uintptr(a.op.Local))
			w.unhold(a.hold)
			w.ackLater(a.c, binary.LittleEndian.Uint64(a.op.Header[16:]))
		default:
			w.postAnswer(a.c, a.op, a.lr, a.hold)
		}
		if a.put {
			w.uw.ReleaseData(a.key)
			if a.c.putsPlaced++; len(a.c.msgs) > 0 { // a message after it may be Recv's now
				select {
				case a.c.recv <- struct{}{}:
				default:
				}
			}
		}
	}
	w.sendAcks()
	clear(batch)
	w.unheldSpare = batch[:0]
	rel := w.takeUnholds()
	w.mu.Unlock()
	w.releaseHolds(rel)
}

// refuseAnswer makes answer op a refusal, without bytes.
func refuseAnswer(op *ucx.Op) {
	h, _ := decodeHeader(&op.Header)
	h.status = answerRefused
	h.encode(&op.Header)
	op.Local, op.Length, op.Mem = 0, 0, 0
}

// unhold queues hold (if any: the zero Hold is none) to be released out of the mutex
// (releaseHolds). Under mu.
func (w *Worker) unhold(hold localHold) {
	if hold != (localHold{}) {
		w.unholds = append(w.unholds, hold)
	}
}

// takeUnholds returns the holds to release, for releaseHolds. Under mu, by the progress
// goroutine.
func (w *Worker) takeUnholds() []localHold {
	if len(w.unholds) == 0 {
		return nil
	}
	rel := w.unholds
	w.unholds, w.unholdsSpare = w.unholdsSpare, nil
	return rel
}

// releaseHolds releases rel (takeUnholds): a free of a buffer made while an answer, or a zombie
// slot (watch.go), held it takes effect now. By the progress goroutine, not under mu.
func (w *Worker) releaseHolds(rel []localHold) {
	if rel == nil {
		return
	}
	for _, h := range rel {
		if err := h.Release(); err != nil {
			w.stats.freeErrs.Add(1)
			w.logf("remote: a free deferred by an answer to a peer, or by an operation of an abandoned connection, failed: %v", err)
		}
	}
	clear(rel)
	w.unholdsSpare = rel[:0]
}

// postAnswers sends the queued answers while slots are free: each connection's in order, the
// connections in turn, each while it may take a slot (takeSlot), so that one at its share of
// the slots, a peer that reads nothing, holds up its own answers and no other's. Under mu.
func (w *Worker) postAnswers() {
	if len(w.answers) == 0 {
		return
	}
	kept := w.answers[:0]
	for _, c := range w.answers {
		if c.state != connOpen {
			w.dropAnswers(c)
		}
		w.postConnAnswers(c)
		if c.answerHead < len(c.answers) {
			kept = append(kept, c)
			continue
		}
		c.answerHead, c.answerWait = 0, false
		if cap(c.answers) > keptAnswers {
			c.answers = nil // the room a flood of answers took goes back
		} else {
			c.answers = c.answers[:0]
		}
	}
	clear(w.answers[len(kept):])
	w.answers = kept
}

// postConnAnswers sends the answers to c's peer waiting for a slot, in order, while c may take
// one. Under mu.
func (w *Worker) postConnAnswers(c *Conn) {
	for c.answerHead < len(c.answers) {
		i, ok := w.takeSlot(slotAnswer, c)
		if !ok {
			return
		}
		a := c.answers[c.answerHead]
		c.answers[c.answerHead] = pendingAnswer{}
		c.answerHead++
		c.answering--
		w.answering--
		if a.lr != nil && w.byID[a.lr.id] != a.lr {
			// Its region was deregistered while the answer waited (its registration, which
			// the send names, unmapped): refused, with none of its bytes. (Its buffer, held,
			// is live.)
			refuseAnswer(&a.op)
			w.unhold(a.hold)
			a.lr, a.hold = nil, localHold{}
		}
		w.sendAnswer(c, i, a.op, a.lr, a.hold)
	}
}

// answered takes the target's answer to an operation of this worker: the bytes of a get, or
// the done of a put. Under mu.
func (w *Worker) answered(c *Conn, h dataHeader, ev *ucx.Event) {
	i := uint32(h.op)
	if int(i) >= len(w.slots) {
		return
	}
	s := &w.slots[i]
	want := uint8(dataDone)
	if s.get {
		want = dataReply
	}
	if s.kind != slotOp || s.gen != uint32(h.op>>32) || s.c != c || !s.remote || h.kind != want {
		return // a stale or forged answer: dropped
	}
	w.uw.DisarmReply(i) // one answer per get: a second would not land
	st := int32(0)
	switch {
	case h.status == answerRefused:
		st = stRefused
	case h.status == answerMemType:
		st = stMemType
	case h.status == answerBusy:
		st = stBusy
	case ev.Landed: // the callback put the bytes in place (ArmReply)
	case h.status != answerOK || ev.Rndv || s.get && uint64(ev.Len) != s.n:
		st = stTruncated // (by rendezvous: refused, never fetched)
	case s.get:
		w.uw.CopyData(ev.Key, s.local)
	}
	s.remote = false
	if s.status == 0 {
		s.status = st
	}
	if !s.sending {
		w.endOp(i)
	}
}

// Statuses of a message-mode operation that the target refused (beside UCX's, which are above
// -100).
const (
	stRefused   = -1001
	stMemType   = -1002
	stTruncated = -1003
	stBusy      = -1004
	stEnded     = -1005 // its connection ended (failed or closed) before the answer came: c.err says why
)
