package ucx

import (
	"strconv"

	"github.com/pinmalloc/pinmalloc"
)

// Status is a ucs_status_t other than UCS_OK, returned as an error.
type Status int

// Error returns "ucx: " and UCX's text for the status (ucs_status_string), or its number when
// the library is not loaded.
func (s Status) Error() string {
	if t := statusText(s); t != "" {
		return "ucx: " + t
	}
	return "ucx: status " + strconv.Itoa(int(s))
}

// Is reports whether the status belongs to the kind target, for errors.Is: a want of memory is
// pinmalloc.ErrOutOfMemory, a peer that is gone or refuses (connection reset, endpoint timeout,
// unreachable, rejected, I/O error) is pinmalloc.ErrRefused, a bad parameter pinmalloc.ErrInvalid,
// a canceled operation pinmalloc.ErrClosed, and busy pinmalloc.ErrBusy.
func (s Status) Is(target error) bool {
	switch target {
	case pinmalloc.ErrOutOfMemory:
		return s == -4 // UCS_ERR_NO_MEMORY
	case pinmalloc.ErrInvalid:
		return s == -5 || s == -7 // UCS_ERR_INVALID_PARAM, UCS_ERR_INVALID_ADDR
	case pinmalloc.ErrClosed:
		return s == statusCanceled
	case pinmalloc.ErrBusy:
		return s == statusBusy
	case pinmalloc.ErrRefused:
		return s.PeerGone() || s == -23 // UCS_ERR_REJECTED
	}
	return false
}

// PeerGone reports whether the status says the peer cannot be reached any more: an I/O error,
// unreachable, not connected, connection reset, timed out, or a link or endpoint failure.
func (s Status) PeerGone() bool {
	switch {
	case s == -3, s == -6, s == -20, s == -24, s == -25: // IO_ERROR, UNREACHABLE, TIMED_OUT, NOT_CONNECTED, CONNECTION_RESET
		return true
	case s <= -40 && s >= -89: // link and endpoint failures (UCS_ERR_ENDPOINT_TIMEOUT among them)
		return true
	}
	return false
}

// Handles of UCX objects, as the library gives them.
type (
	// Mem is a memory registration (ucp_mem_h).
	Mem uintptr
	// Rkey is an unpacked remote key (ucp_rkey_h), valid on the endpoint it was unpacked for.
	Rkey uintptr
	// Ep is an endpoint (ucp_ep_h).
	Ep uintptr
	// ConnRequest is a connection request a listener received (ucp_conn_request_h).
	ConnRequest uintptr
	// Listener is a listener (ucp_listener_h).
	Listener uintptr
)

// Kinds of Op.
const (
	OpPut   = 0
	OpGet   = 1
	OpFlush = 2
)

// OpData is the kind of Op that sends a data message: Header, then Length bytes at Local
// (none when Length is 0), eagerly, to the peer's data handler (EventData). OpDataAny sends
// it by whatever protocol UCX picks: a large one by rendezvous, whose bytes the receiver
// fetches (Worker.RecvData) from Local, which must stay as it is until the send completes.
const (
	OpData    = 3
	OpDataAny = 4
)

// HeaderLen is the length of a data message's header.
const HeaderLen = 64

// PeekLen is how much of a message beyond the worker's limits, or dropped in a flood, is kept
// (Event.Oversize, Event.Dropped).
const PeekLen = 16

// Op is one operation for Worker.Post, with the layout of shim.h's pm_op (TestOpLayout checks
// it): a put of Length bytes from Local to Remote under Rkey on Ep, a get the other way, a
// flush of Ep (every put and get posted on it before is complete at the target), or a data
// message (OpData). Mem is the registration that holds Local (0: let UCX find it), MemType its
// memory type. Slot names the operation's completion. Post sets Status: 0 done at once, 1 in
// flight (its completion will come from Progress), negative: refused, with that ucs_status_t.
type Op struct {
	Ep      Ep
	Rkey    Rkey
	Mem     Mem
	Local   uint64
	Remote  uint64
	Length  uint64
	Slot    uint32
	Kind    int32
	Status  int32
	MemType int32
	// Copy, 1 on a data message of host memory, sends it by copy, never by zero copy (the
	// package doc, "Sends by copy").
	Copy   int32
	Header [HeaderLen]byte
}

// Completion is an operation's end: its slot and its status (0, or a ucs_status_t < 0).
type Completion struct {
	Slot   uint32
	Status int32
}

// Kinds of Event.
const (
	// EventConn is a connection request: Handle is the ConnRequest, Tag the listener's tag.
	EventConn = 1
	// EventMessage is an active message: Data its bytes, Handle the reply endpoint or 0.
	EventMessage = 2
	// EventEpError is an endpoint's failure: Handle the Ep, Status why.
	EventEpError = 3
	// EventData is a data message (OpData): Header its header, Len its length; its bytes stay
	// in the worker until CopyData copies them and ReleaseData gives them back, by Key.
	EventData = 4
)

// Event is something UCX told the worker's callbacks, other than a completion.
type Event struct {
	Kind   int
	Status Status
	Handle uintptr
	Tag    uint64
	Data   []byte
	Header [HeaderLen]byte
	Len    int
	Key    uint64
	// Rndv says a data message's bytes are still at its sender: Worker.RecvData fetches them.
	Rndv bool
	// Oversize says a message (EventMessage) was beyond the worker's limits
	// (Worker.LimitMessages): Len is its length, Data its first PeekLen bytes, the rest dropped;
	// or a data message (EventData) beyond Worker.LimitData: Len is its length, and it has no
	// bytes to copy.
	Oversize bool
	// Dropped says a message (EventMessage) came when the worker's queue was full (NewWorker's
	// msgLimit, a flood in one progress round): Len is its length, Data its first PeekLen
	// bytes, the rest dropped.
	Dropped bool
	// Landed says a data message was the answer a slot armed by ArmReply waits for: its
	// bytes are at the slot's destination already (Len is 0), and the slot is disarmed.
	Landed bool
}
