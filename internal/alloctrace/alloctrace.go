// Package alloctrace reads and writes allocation traces: every allocation (size, alignment,
// time, goroutine) and every free of a run, in a compact binary form that a benchmark replays
// against other allocators (cd bench && go run . -replay FILE).
//
// # Format
//
// A file starts with the 8 bytes "PMTRACE1" and holds one record per event, in the order the
// events happened:
//
//	alloc:  0x01, uvarint dt, uvarint size, byte log2(alignment) (0: the pool's own), uvarint goroutine
//	free:   0x02, uvarint dt, uvarint id
//
// dt is the time since the previous event, in nanoseconds. Allocations are numbered from 0 in
// the order of their records; a free names the allocation it frees by that number. A typical
// record takes 5 to 8 bytes.
//
// Read checks what a replay relies on: no size or alignment beyond the address space
// (MaxBytes), nor live bytes beyond it at any point, and times that fit a time.Duration. So a
// program that replays a trace can size and sum its allocations without overflow.
package alloctrace

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync"
	"time"
)

// Magic starts every trace.
const Magic = "PMTRACE1"

const (
	opAlloc = 1
	opFree  = 2
)

// ErrFormat means the input is not a well-formed trace, or (from Writer.Alloc) that an
// allocation is one a well-formed trace cannot hold.
var ErrFormat = errors.New("alloctrace: malformed trace")

// MaxBytes is the address space of a 64-bit process (47 bits: x86-64 and arm64 with 4-level
// page tables): no allocation, alignment or sum of live allocations of a well-formed trace
// exceeds it.
const MaxBytes = 1 << maxLog

const maxLog = 47

// Event is one record.
type Event struct {
	// Free tells a free from an allocation.
	Free bool
	// At is the time since the trace began.
	At time.Duration
	// ID numbers the allocation (for a free, the allocation it frees).
	ID uint64
	// Size and Align are the allocation's bytes and alignment (0: the allocator's own);
	// Goroutine identifies the goroutine that allocated. Zero for a free.
	Size, Align uint64
	Goroutine   uint64
}

// Writer writes a trace. It is safe for concurrent use; each method is one record. Writes
// are buffered: Flush (or Close of what owns it) writes them out.
type Writer struct {
	mu     sync.Mutex
	w      *bufio.Writer
	start  time.Time
	last   time.Duration
	next   uint64
	ids    map[uintptr]traced // live allocations by address
	live   uint64             // their bytes, as Read sums them
	err    error
	header bool
	buf    [3*binary.MaxVarintLen64 + 2]byte
}

// NewWriter returns a writer to w. The header is written with the first record.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), start: time.Now(), ids: map[uintptr]traced{}}
}

// traced is a live allocation a Writer recorded: its number and size.
type traced struct{ id, size uint64 }

// Alloc records an allocation of size bytes aligned to align (0: the allocator's own) at
// addr, by goroutine g. An allocation Read would refuse is refused with ErrFormat and not
// recorded, nor is the free of addr that follows: an alignment that is not a power of two or
// is beyond MaxBytes, a size of 0 or beyond MaxBytes, or one that would take the live bytes
// beyond MaxBytes.
func (t *Writer) Alloc(addr uintptr, size, align, g uint64) error {
	if align&(align-1) != 0 || align > MaxBytes {
		return fmt.Errorf("%w: allocation of %d bytes aligned to %#x: not a power of two "+
			"up to 2^%d", ErrFormat, size, align, maxLog)
	}
	if size == 0 || size > MaxBytes {
		return fmt.Errorf("%w: allocation of %d bytes (1 to 2^%d)", ErrFormat, size, maxLog)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if size > MaxBytes-t.live {
		return fmt.Errorf("%w: allocation of %d bytes beside %d live: beyond 2^%d",
			ErrFormat, size, t.live, maxLog)
	}
	t.live += size
	b := t.head(opAlloc)
	b = binary.AppendUvarint(b, size)
	lg := byte(0)
	if align > 0 {
		lg = byte(bits.TrailingZeros64(align))
	}
	b = append(b, lg)
	b = binary.AppendUvarint(b, g)
	t.ids[addr] = traced{t.next, size}
	t.next++
	t.put(b)
	return nil
}

// Free runs release (the allocator's free of addr) and, when it succeeds, records the free,
// both under the writer's lock: an allocation racing with it cannot be handed addr and have
// its record taken for this one's.
func (t *Writer) Free(addr uintptr, release func() error) error {
	t.Lock()
	defer t.Unlock()
	if err := release(); err != nil {
		return err
	}
	t.FreeLocked(addr)
	return nil
}

// Lock takes the writer's lock, for a caller that frees memory and records it with
// FreeLocked without a closure (Free's release allocates when it captures).
func (t *Writer) Lock() { t.mu.Lock() }

// Unlock releases the lock Lock took.
func (t *Writer) Unlock() { t.mu.Unlock() }

// FreeLocked records the free of the allocation at addr; the caller holds the lock (Lock)
// since before the free. A free of memory allocated before tracing began is not recorded.
func (t *Writer) FreeLocked(addr uintptr) {
	a, ok := t.ids[addr]
	if !ok {
		return
	}
	delete(t.ids, addr)
	t.live -= a.size
	t.put(binary.AppendUvarint(t.head(opFree), a.id))
}

// head starts a record: the op and the time since the previous one.
func (t *Writer) head(op byte) []byte {
	now := time.Since(t.start)
	dt := max(now-t.last, 0)
	t.last = now
	return binary.AppendUvarint(append(t.buf[:0], op), uint64(dt))
}

func (t *Writer) put(b []byte) {
	if t.err != nil {
		return
	}
	if !t.header {
		t.header = true
		if _, t.err = t.w.WriteString(Magic); t.err != nil {
			return
		}
	}
	_, t.err = t.w.Write(b)
}

// Flush writes the buffered records out and returns the first error of any write so far.
func (t *Writer) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		if !t.header {
			t.header = true
			_, t.err = t.w.WriteString(Magic)
		}
		if t.err == nil {
			t.err = t.w.Flush()
		}
	}
	return t.err
}

// Read reads a whole trace and checks it: every free names an earlier allocation, freed once;
// sizes, alignments and the live bytes stay within MaxBytes; the time fits a time.Duration.
// An error wraps ErrFormat, and also io.ErrUnexpectedEOF where the input ends inside a record.
func Read(r io.Reader) ([]Event, error) {
	br := bufio.NewReader(r)
	var magic [len(Magic)]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil || string(magic[:]) != Magic {
		return nil, fmt.Errorf("%w: no %q header", ErrFormat, Magic)
	}
	var evs []Event
	var at time.Duration
	var sizes []uint64 // by allocation; 0 once freed
	var live uint64
	for {
		op, err := br.ReadByte()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return nil, err
		}
		n := len(evs)
		// bad wraps the cause of a field that cannot be read: a trace that ends inside a
		// record is cut short (io.ErrUnexpectedEOF), not ended (io.EOF).
		bad := func(what string, err error) error {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%w: record %d: %s: %w", ErrFormat, n, what, err)
		}
		dt, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, bad("time", err)
		}
		if dt > math.MaxInt64-uint64(at) {
			return nil, fmt.Errorf("%w: record %d: time %v + %d ns overflows", ErrFormat, n, at, dt)
		}
		at += time.Duration(dt)
		switch op {
		case opAlloc:
			e := Event{At: at, ID: uint64(len(sizes))}
			if e.Size, err = binary.ReadUvarint(br); err != nil {
				return nil, bad("size", err)
			}
			if e.Size == 0 || e.Size > MaxBytes {
				return nil, fmt.Errorf("%w: record %d: size %d (1 to %d)",
					ErrFormat, n, e.Size, uint64(MaxBytes))
			}
			if live += e.Size; live > MaxBytes {
				return nil, fmt.Errorf("%w: record %d: %d bytes live, beyond the address space (%d)", ErrFormat, n, live, uint64(MaxBytes))
			}
			lg, err := br.ReadByte()
			if err != nil {
				return nil, bad("alignment", err)
			}
			if lg > maxLog {
				return nil, fmt.Errorf("%w: record %d: alignment 2^%d (at most 2^%d)",
					ErrFormat, n, lg, maxLog)
			}
			if lg > 0 {
				e.Align = 1 << lg
			}
			if e.Goroutine, err = binary.ReadUvarint(br); err != nil {
				return nil, bad("goroutine", err)
			}
			sizes = append(sizes, e.Size)
			evs = append(evs, e)
		case opFree:
			id, err := binary.ReadUvarint(br)
			if err != nil {
				return nil, bad("allocation freed", err)
			}
			if id >= uint64(len(sizes)) || sizes[id] == 0 {
				return nil, fmt.Errorf("%w: record %d frees allocation %d (of %d; freed before: %v)", ErrFormat, n, id, len(sizes), id < uint64(len(sizes)))
			}
			live -= sizes[id]
			sizes[id] = 0
			evs = append(evs, Event{Free: true, At: at, ID: id})
		default:
			return nil, fmt.Errorf("%w: record %d: op %d", ErrFormat, n, op)
		}
	}
}
