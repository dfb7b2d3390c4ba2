//go:build cgo && linux

package ucx

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

// PeekLen is shim.h's PM_MSG_PEEK: each difference below overflows, a compile error, unless
// they are equal.
const _ = uint(PeekLen-C.PM_MSG_PEEK) + uint(C.PM_MSG_PEEK-PeekLen)

// AMID is the active-message id this binding's messages use; data messages use AMID+1.
const AMID = 0x7069 // "pi"

// Worker is a UCP worker (ucp_worker_h) and the C state its callbacks write. None of its
// methods may run at once with another on the same worker or its context: the caller
// serializes them (remote.Worker's mutex).
type Worker struct {
	c     *Context
	h     C.uintptr_t
	st    *C.pm_state
	slots int
	msgs  []unsafe.Pointer // by slot: the C copy of a message in flight, freed at its completion
	lis   map[Listener]unsafe.Pointer
	data  map[uint64]*C.pm_event // data messages handed out by Events, by key
	key   uint64

	// Progress's out-parameter, here rather than on its stack, which passing it to C would
	// move to the heap: an allocation every progress round. (Events' is in C memory,
	// pm_state.out.)
	progressed C.uint

	// ownChecked says ownErr is set: why peers' addresses cannot be checked (ConnectAddress),
	// or nil.
	ownChecked bool
	ownErr     error

	// NoPeerFailure makes the endpoints created from then on use no peer failure handling
	// (UCP_ERR_HANDLING_MODE_NONE): UCX may then take transports that have none (its
	// shared-memory ones, in 1.13), and reports no peer's failure (no EventEpError).
	NoPeerFailure bool
}

// NewWorker creates a worker of context c with slots operations in flight at most, whose
// queue of received messages (and connection requests, and failures) holds msgLimit bytes at
// most: Progress stops once half of it is taken, and a message beyond it (one call of UCX's
// progress delivered more) is dropped, counted (Dropped) and reported by an EventMessage with
// Dropped set.
func (c *Context) NewWorker(slots, msgLimit int) (*Worker, error) {
	if slots <= 0 || slots > 1<<24 {
		return nil, fmt.Errorf("ucx: %d slots", slots)
	}
	w := &Worker{c: c, slots: slots, msgs: make([]unsafe.Pointer, slots), lis: map[Listener]unsafe.Pointer{}, data: map[uint64]*C.pm_event{}}
	w.st = C.pm_state_new(C.uint32_t(slots), C.size_t(msgLimit), c.l.must(symRequestFree))
	if w.st == nil {
		return nil, fmt.Errorf("ucx: worker state: %w", Status(-4))
	}
	if err := c.l.call(symWorkerCreate, func(f C.uintptr_t) C.int { return C.pm_worker_create(f, c.h, &w.h) }); err != nil {
		C.pm_state_free(w.st)
		return nil, fmt.Errorf("ucp_worker_create: %w%s", err, tcpSegmentsHint(os.LookupEnv))
	}
	if err := c.l.call(symSetAmRecvHandler, func(f C.uintptr_t) C.int { return C.pm_set_am_handler(f, w.h, AMID, w.st) }); err != nil {
		w.Destroy()
		return nil, fmt.Errorf("ucp_worker_set_am_recv_handler: %w", err)
	}
	if err := c.l.call(symSetAmRecvHandler, func(f C.uintptr_t) C.int { return C.pm_set_data_handler(f, w.h, AMID+1, w.st) }); err != nil {
		w.Destroy()
		return nil, fmt.Errorf("ucp_worker_set_am_recv_handler: %w", err)
	}
	if _, err := c.l.fn(symAmDataRelease); err != nil {
		w.Destroy()
		return nil, err
	}
	return w, nil
}

// Slots returns the number of operations the worker can have in flight.
func (w *Worker) Slots() int { return w.slots }

// Destroy destroys the worker; its endpoints must be closed and its listeners destroyed (what
// is left is destroyed with it).
func (w *Worker) Destroy() {
	for l := range w.lis {
		w.DestroyListener(l)
	}
	for k := range w.data {
		w.ReleaseData(k)
	}
	if f, err := w.c.l.fn(symWorkerDestroy); err == nil {
		C.pm_call_ptr(f, w.h)
	}
	for i, m := range w.msgs {
		if m != nil {
			C.free(m)
			w.msgs[i] = nil
		}
	}
	C.pm_state_free(w.st)
	w.st = nil
}

// Dropped returns the number of messages the worker's callbacks dropped: a message beyond the
// queue's limit (reported: Event.Dropped) or the worker's limits (Event.Oversize), one with a
// header or sent by rendezvous (not this binding's), or one that found no memory.
func (w *Worker) Dropped() uint64 { return uint64(w.st.ev_dropped) }

// Queued returns the number of events the callbacks queued that Events has not handed out
// yet, and the most that were ever queued at once (the queue's high-water mark).
func (w *Worker) Queued() (now, high uint64) { return uint64(w.st.ev_queued), uint64(w.st.ev_high) }

// Landed returns the number of answers to gets that the callbacks copied straight into place
// (ArmReply).
func (w *Worker) Landed() uint64 { return uint64(w.st.landed) }

// LimitMessages makes the callbacks drop a message (AMID) of more than max bytes, or one
// whose byte 4 is kind of more than kindMax bytes, without copying or queueing its bytes: it
// comes as an EventMessage with Oversize set, Len its length and Data its first PeekLen bytes
// only, and counts as dropped. 0 is no limit. UCX has assembled such a message whole before
// its callback sees its length (an eager message of several fragments, in a buffer of UCX's):
// that is the earliest it can be refused.
func (w *Worker) LimitMessages(max, kindMax int, kind byte) {
	w.st.msg_max, w.st.msg_kind_max, w.st.msg_kind = C.size_t(max), C.size_t(kindMax), C.uchar(kind)
}

// LimitData bounds an eager data message (EventData) at max bytes (0: no bound): a longer one
// is given back to UCX by the callback, neither kept nor copied, and comes as an EventData with
// Oversize set, its header and its length (Len), no bytes.
func (w *Worker) LimitData(max int) { w.st.data_max = C.size_t(max) }

// DropSpares frees the buffers the worker keeps for the bytes of data messages to come, which
// it copies where the transport lends them for the callback only (tcp): 8 MiB at most, kept
// while messages stream in. For a worker going idle.
func (w *Worker) DropSpares() { C.pm_spares_free(w.st) }

// Address returns the worker's address, for a peer's ConnectAddress.
func (w *Worker) Address() ([]byte, error) {
	var a unsafe.Pointer
	var n C.size_t
	if err := w.c.l.call(symWorkerGetAddress, func(f C.uintptr_t) C.int { return C.pm_worker_address(f, w.h, &a, &n) }); err != nil {
		return nil, fmt.Errorf("ucp_worker_get_address: %w", err)
	}
	out := C.GoBytes(a, C.int(n))
	if f, err := w.c.l.fn(symWorkerReleaseAddress); err == nil {
		C.pm_worker_release_address(f, w.h, a)
	}
	return out, nil
}

// EventFD returns the file descriptor that becomes readable when the worker has work, once
// armed (Arm). It belongs to the worker: never close it.
func (w *Worker) EventFD() (int, error) {
	var fd C.int
	if err := w.c.l.call(symWorkerGetEfd, func(f C.uintptr_t) C.int { return C.pm_worker_efd(f, w.h, &fd) }); err != nil {
		return -1, fmt.Errorf("ucp_worker_get_efd: %w", err)
	}
	return int(fd), nil
}

// Arm arms the event fd; busy reports that the worker has events to progress first (the fd
// would not fire for them).
func (w *Worker) Arm() (busy bool, err error) {
	err = w.c.l.call(symWorkerArm, func(f C.uintptr_t) C.int { return C.pm_status_ptr(f, w.h) })
	if s, ok := err.(Status); ok && s == statusBusy {
		return true, nil
	}
	return false, err
}

// Signal makes the event fd readable, to wake a goroutine waiting on it. Unlike the other
// methods, it may run at once with them.
func (w *Worker) Signal() error {
	return w.c.l.call(symWorkerSignal, func(f C.uintptr_t) C.int { return C.pm_status_ptr(f, w.h) })
}

// Progress progresses the worker up to rounds times (fewer once a round makes no progress, or
// once EventBatch events or more, or messages of half NewWorker's msgLimit, are queued for
// Events) and returns the completions queued
// since the last call, at most len(out), and whether any round progressed.
func (w *Worker) Progress(rounds int, out []Completion) (n int, progressed bool) {
	var cq *C.pm_cqe
	if len(out) > 0 {
		cq = (*C.pm_cqe)(unsafe.Pointer(&out[0]))
	}
	n = int(C.pm_progress(w.c.l.must(symWorkerProgress), w.h, w.st, C.int(rounds), C.uint64_t(EventBatch), cq, C.int(len(out)), &w.progressed))
	for _, c := range out[:n] {
		w.freeMsg(c.Slot)
	}
	return n, w.progressed != 0
}

func (w *Worker) freeMsg(slot uint32) {
	if int(slot) < len(w.msgs) && w.msgs[slot] != nil {
		C.free(w.msgs[slot])
		w.msgs[slot] = nil
	}
}

// Events appends the events queued by the callbacks, at most max of them, to out.
func (w *Worker) Events(out []Event, max int) []Event {
	buf := &w.st.out
	for max > 0 {
		n := int(C.pm_events(w.st, C.int(min(max, len(buf)))))
		for _, e := range buf[:n] {
			ev := Event{Kind: int(e.kind), Status: Status(e.status), Handle: uintptr(e.h), Tag: uint64(e.tag)}
			if ev.Kind == EventData {
				w.key++
				ev.Key, ev.Len, ev.Status = w.key, int(e.len), 0
				ev.Rndv, ev.Landed = e.status == C.PM_DATA_RNDV, e.status == C.PM_DATA_LANDED
				if ev.Oversize = e.status == C.PM_DATA_OVERSIZE; ev.Oversize {
					ev.Len = int(e.tag)
				}
				ev.Header = *(*[HeaderLen]byte)(unsafe.Pointer(&e.hdr[0]))
				w.data[ev.Key] = e
				out = append(out, ev)
				continue
			}
			if e.len > 0 {
				ev.Data = C.GoBytes(unsafe.Pointer(C.pm_event_data(e)), C.int(e.len))
			}
			if ev.Kind == EventMessage && (e.status == C.PM_MSG_OVERSIZE || e.status == C.PM_MSG_DROPPED) {
				ev.Oversize, ev.Dropped = e.status == C.PM_MSG_OVERSIZE, e.status == C.PM_MSG_DROPPED
				ev.Len, ev.Status, ev.Tag = int(e.tag), 0, 0
			}
			C.pm_event_free(e)
			out = append(out, ev)
		}
		if n < len(buf) {
			break
		}
		max -= n
	}
	return out
}

// CopyData copies the bytes of data message key (an EventData) to dst, which must hold them
// (the event's Len bytes of memory that is not Go's).
func (w *Worker) CopyData(key uint64, dst uintptr) {
	if e := w.data[key]; e != nil {
		C.pm_data_copy(e, C.uintptr_t(dst))
	}
}

// ArmReply arms slot for the answer to a get by message: the data message whose header names
// operation op (not 0) and connection conn, with status OK and n bytes, is copied by the
// callback straight to the n bytes at dst (memory that is not Go's, kept live until the slot
// is disarmed) and comes as an EventData with Landed set. Anything else comes as before.
func (w *Worker) ArmReply(slot uint32, op, conn uint64, dst uintptr, n uint64) {
	s := w.slot(slot)
	s.reply_op, s.reply_conn, s.reply_dst, s.reply_len = C.uint64_t(op), C.uint64_t(conn), C.uintptr_t(dst), C.size_t(n)
}

// DisarmReply disarms slot: no answer lands at its destination any more.
func (w *Worker) DisarmReply(slot uint32) { w.slot(slot).reply_op = 0 }

func (w *Worker) slot(i uint32) *C.pm_slot {
	return &unsafe.Slice(w.st.slots, w.slots)[i]
}

// RecvData receives the bytes of data message key (an EventData, whole or by rendezvous)
// into the Len bytes at dst, of registration m (0: none) and memory type memType; inflight
// reports that they come later, their completion in slot. Eager bytes are copied at once. The
// message is UCX's again after the call.
func (w *Worker) RecvData(key uint64, dst uintptr, m Mem, memType int, slot uint32) (inflight bool, err error) {
	e := w.data[key]
	if e == nil {
		return false, Status(-12) // UCS_ERR_NO_ELEM
	}
	if e.status != C.PM_DATA_RNDV {
		C.pm_data_copy(e, C.uintptr_t(dst))
		w.ReleaseData(key)
		return false, nil
	}
	delete(w.data, key)
	f, err := w.c.l.fn(symAmRecvDataNbx)
	if err != nil {
		C.pm_data_release(w.c.l.must(symAmDataRelease), w.h, w.st, e)
		return false, err
	}
	s := C.pm_data_recv(f, w.h, e, C.uintptr_t(dst), e.len, C.uintptr_t(m), C.int(memType), w.st, C.uint32_t(slot))
	if s == statusInProgress {
		return true, nil
	}
	return false, check(s)
}

// ReleaseData gives data message key back to UCX.
func (w *Worker) ReleaseData(key uint64) {
	if e := w.data[key]; e != nil {
		delete(w.data, key)
		C.pm_data_release(w.c.l.must(symAmDataRelease), w.h, w.st, e)
	}
}

// Listen listens for connections on the socket address sa (a struct sockaddr_in or
// sockaddr_in6, as bytes); each request comes as an EventConn with tag.
func (w *Worker) Listen(sa []byte, tag uint64) (Listener, error) {
	var l C.uintptr_t
	var arg unsafe.Pointer
	err := w.c.l.call(symListenerCreate, func(f C.uintptr_t) C.int {
		return C.pm_listener_create(f, w.h, unsafe.Pointer(&sa[0]), C.int(len(sa)), w.st, C.uint64_t(tag), &l, &arg)
	})
	if err != nil {
		return 0, fmt.Errorf("ucp_listener_create: %w", err)
	}
	w.lis[Listener(l)] = arg
	return Listener(l), nil
}

// ListenerPort returns the port l listens on.
func (w *Worker) ListenerPort(l Listener) (int, error) {
	var port C.int
	err := w.c.l.call(symListenerQuery, func(f C.uintptr_t) C.int { return C.pm_listener_port(f, C.uintptr_t(l), &port) })
	return int(port), err
}

// DestroyListener destroys l.
func (w *Worker) DestroyListener(l Listener) {
	arg, ok := w.lis[l]
	if !ok {
		return
	}
	delete(w.lis, l)
	if f, err := w.c.l.fn(symListenerDestroy); err == nil {
		C.pm_call_ptr(f, C.uintptr_t(l))
	}
	C.free(arg)
}

// Reject refuses connection request r of listener l.
func (w *Worker) Reject(l Listener, r ConnRequest) error {
	return w.c.l.call(symListenerReject, func(f C.uintptr_t) C.int { return C.pm_status_ptr2(f, C.uintptr_t(l), C.uintptr_t(r)) })
}

// ConnRequestAddr returns the client's socket address of connection request r (a struct
// sockaddr_storage, as bytes: SockaddrString formats it).
func (w *Worker) ConnRequestAddr(r ConnRequest) ([]byte, error) {
	out := make([]byte, 128)
	err := w.c.l.call(symConnRequestQuery, func(f C.uintptr_t) C.int {
		return C.pm_conn_request_addr(f, C.uintptr_t(r), unsafe.Pointer(&out[0]), C.int(len(out)))
	})
	return out, err
}

// ConnectAddress creates an endpoint to the worker whose address is addr (Address), with peer
// failure reported as an EventEpError. An address CheckAddress refuses is refused, never given
// to UCX; so is every address where this worker's own does not pass CheckAddress (UCX's
// unified mode, whose addresses carry no lengths to check).
func (w *Worker) ConnectAddress(addr []byte) (Ep, error) {
	if !w.ownChecked {
		w.ownChecked = true
		own, err := w.Address()
		if err == nil {
			err = CheckAddress(own)
		}
		if err != nil {
			w.ownErr = fmt.Errorf("ucx: peers' addresses cannot be checked: this worker's own address does not pass (UCX_UNIFIED_MODE?): %w", err)
		}
	}
	if w.ownErr != nil {
		return 0, w.ownErr
	}
	if err := CheckAddress(addr); err != nil {
		return 0, err
	}
	return w.epCreate(unsafe.Pointer(&addr[0]), nil, 0, 0)
}

// ConnectSockaddr creates an endpoint to the listener at socket address sa.
func (w *Worker) ConnectSockaddr(sa []byte) (Ep, error) {
	return w.epCreate(nil, unsafe.Pointer(&sa[0]), len(sa), 0)
}

// Accept creates the endpoint of connection request r.
func (w *Worker) Accept(r ConnRequest) (Ep, error) { return w.epCreate(nil, nil, 0, r) }

func (w *Worker) epCreate(addr, sa unsafe.Pointer, salen int, r ConnRequest) (Ep, error) {
	var ep C.uintptr_t
	pf := C.int(1)
	if w.NoPeerFailure {
		pf = 0
	}
	err := w.c.l.call(symEpCreate, func(f C.uintptr_t) C.int {
		return C.pm_ep_create(f, w.h, w.st, addr, sa, C.int(salen), C.uintptr_t(r), pf, &ep)
	})
	if err != nil {
		return 0, fmt.Errorf("ucp_ep_create: %w", err)
	}
	return Ep(ep), nil
}

// CloseEp closes ep (force: at once, without a flush); inflight reports that the close
// completes later, in slot.
func (w *Worker) CloseEp(ep Ep, force bool, slot uint32) (inflight bool, err error) {
	f, err := w.c.l.fn(symEpCloseNbx)
	if err != nil {
		return false, err
	}
	fc := C.int(0)
	if force {
		fc = 1
	}
	s := C.pm_ep_close(f, C.uintptr_t(ep), fc, w.st, C.uint32_t(slot))
	if s == statusInProgress {
		return true, nil
	}
	return false, check(s)
}

// UnpackRkey unpacks packed, a remote key a peer packed (Context.PackRkey), for ep.
func (w *Worker) UnpackRkey(ep Ep, packed []byte) (Rkey, error) {
	if len(packed) == 0 {
		return 0, fmt.Errorf("ucx: empty remote key: %w", Status(-5))
	}
	var r C.uintptr_t
	err := w.c.l.call(symEpRkeyUnpack, func(f C.uintptr_t) C.int {
		return C.pm_rkey_unpack(f, C.uintptr_t(ep), unsafe.Pointer(&packed[0]), &r)
	})
	if err != nil {
		return 0, fmt.Errorf("ucp_ep_rkey_unpack: %w", err)
	}
	return Rkey(r), nil
}

// RkeyPtr returns the address in this process of the peer's address raddr under r, where a
// transport of r maps the peer's memory into this process (ucp_rkey_ptr: sysv, posix, xpmem
// segments); UCS_ERR_UNREACHABLE (Status(-6)) where none does. UCX checks no range: the
// caller checks where the address lies.
func (w *Worker) RkeyPtr(r Rkey, raddr uint64) (uintptr, error) {
	var p C.uintptr_t
	if err := w.c.l.call(symRkeyPtr, func(f C.uintptr_t) C.int { return C.pm_rkey_ptr(f, C.uintptr_t(r), C.uint64_t(raddr), &p) }); err != nil {
		return 0, fmt.Errorf("ucp_rkey_ptr: %w", err)
	}
	return uintptr(p), nil
}

// DestroyRkey destroys r.
func (w *Worker) DestroyRkey(r Rkey) {
	if f, err := w.c.l.fn(symRkeyDestroy); err == nil {
		C.pm_call_ptr(f, C.uintptr_t(r))
	}
}

// Post posts ops, in order, in one cgo call, and sets each one's Status; it returns how many
// are in flight (their completions come from Progress).
func (w *Worker) Post(ops []Op) (inflight int, err error) {
	if len(ops) == 0 {
		return 0, nil
	}
	var fns [4]C.uintptr_t
	for i, id := range [...]symID{symPutNbx, symGetNbx, symEpFlushNbx, symAmSendNbx} {
		if fns[i], err = w.c.l.fn(id); err != nil {
			return 0, err
		}
	}
	var dt C.uint64_t
	for i := range ops {
		if ops[i].Copy != 0 {
			if dt, err = w.c.l.copyDatatype(); err != nil {
				return 0, err
			}
			break
		}
	}
	return int(C.pm_post(fns[0], fns[1], fns[2], fns[3], AMID+1, dt, w.st, (*C.pm_op)(unsafe.Pointer(&ops[0])), C.int(len(ops)))), nil
}

// PackedBytes returns how many bytes UCX has packed for this worker's sends by copy (Op.Copy,
// SendMessage's byCopy): what the tests check to know those sends went by copy. Like every
// call on the worker, it is made under the caller's lock.
func (w *Worker) PackedBytes() uint64 { return uint64(w.st.packed) }

// SendMessage sends data as one active message on ep (eagerly: every byte in the first
// transfer), from a C copy it frees at the completion; inflight reports that the send
// completes later, in slot. With reply, the receiver's event names its endpoint to the
// sender. With byCopy, UCX copies it into its transport's buffers, never sending it by zero
// copy (the package doc, "Sends by copy").
func (w *Worker) SendMessage(ep Ep, data []byte, reply, byCopy bool, slot uint32) (inflight bool, err error) {
	f, err := w.c.l.fn(symAmSendNbx)
	if err != nil {
		return false, err
	}
	var dt C.uint64_t
	if byCopy {
		if dt, err = w.c.l.copyDatatype(); err != nil {
			return false, err
		}
	}
	var src unsafe.Pointer
	if len(data) > 0 {
		src = unsafe.Pointer(&data[0])
	}
	cp := C.pm_copy(src, C.size_t(len(data)))
	if cp == nil {
		return false, Status(-4)
	}
	w.msgs[slot] = cp
	r := C.int(0)
	if reply {
		r = 1
	}
	s := C.pm_am_send(f, C.uintptr_t(ep), AMID, nil, 0, cp, C.size_t(len(data)), r, dt, w.st, C.uint32_t(slot))
	if s == statusInProgress {
		return true, nil
	}
	w.freeMsg(slot)
	return false, check(s)
}

// opSize is the size of shim.h's pm_op, which Op mirrors (op layout test).
func opSize() uintptr { return C.sizeof_pm_op }

// EpInfo returns UCX's account of ep's configuration (ucp_ep_print_info): its lanes and the
// protocols they carry.
func (w *Worker) EpInfo(ep Ep) (string, error) {
	f, err := w.c.l.fn(symEpPrintInfo)
	if err != nil {
		return "", err
	}
	var n C.size_t
	p := C.pm_ep_info(f, C.uintptr_t(ep), &n)
	if p == nil {
		return "", Status(-4)
	}
	defer C.free(unsafe.Pointer(p))
	return C.GoStringN(p, C.int(n)), nil
}

// landReply runs the callbacks' landing of a get's answer (shim.c's land_reply) once, on a state
// of nslots slots whose slot is armed as ArmReply arms it, for op, conn and len(dst) bytes; dst
// is copied to C memory for it (the callback writes a pool buffer, never Go memory) and back. For
// tests (FuzzLandReply).
func landReply(hdr *[HeaderLen]byte, data []byte, nslots, slot uint32, op, conn uint64, dst []byte) (landed, disarmed bool) {
	cd := C.CBytes(dst)
	defer C.free(cd)
	var src unsafe.Pointer
	if len(data) > 0 {
		src = unsafe.Pointer(&data[0])
	}
	var dis C.int
	l := C.pm_test_land((*C.uchar)(unsafe.Pointer(&hdr[0])), src, C.size_t(len(data)), C.uint32_t(nslots), C.uint32_t(slot),
		C.uint64_t(op), C.uint64_t(conn), C.uintptr_t(uintptr(cd)), C.size_t(len(dst)), &dis)
	if l < 0 {
		panic("ucx: landReply: no memory, or a landing not counted once")
	}
	copy(dst, unsafe.Slice((*byte)(cd), len(dst)))
	return l != 0, dis != 0
}

// spareCheck runs shim.c's pm_test_spares: n data messages of len bytes (data_max at most),
// copied into events, taken and released, twice; it returns 0 or the check that failed. For
// tests.
func spareCheck(dataMax, len, n int) int {
	return int(C.pm_test_spares(C.size_t(dataMax), C.size_t(len), C.int(n)))
}

// Spares returns the number of spare buffers the worker keeps for data messages (DropSpares).
func (w *Worker) Spares() int { return int(w.st.nspares) }

// flood runs the callbacks' queue under a flood (shim.c's pm_test_flood): one progress call of
// up to rounds rounds, each of which delivers perCall copies of msg, on a queue of limit bytes.
// It returns the messages queued whole, those dropped, and of those the ones reported by an
// event of their own (Event.Dropped). For tests.
func flood(msg []byte, perCall, rounds, limit int) (queued, dropped, reported uint64) {
	cm := C.CBytes(msg)
	defer C.free(cm)
	var q, d, r C.uint64_t
	switch C.pm_test_flood((*C.uchar)(cm), C.size_t(len(msg)), C.int(perCall), C.int(rounds), C.size_t(limit), &q, &d, &r) {
	case -1:
		panic("ucx: flood: no memory")
	case -2:
		panic("ucx: flood: a dropped message reported with other bytes than its own")
	}
	return uint64(q), uint64(d), uint64(r)
}
