package uvm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// What a Close keeps: the parts of the tier that the driver refused to give back (release),
// which a later Close tries again. The tier's own mover, host pool and device heap are kept
// while they are not nil (closeMover, closePool, closeHeap drop each once closed); its streams
// while their handles are not 0, and its events while t.rel.idle holds them (destroyStreams
// zeroes and drops each one destroyed). So what was given back is never given back twice.

// keptOwn reports whether a Close kept the tier's own mover, host pool or device heap, which
// failed to close (closeMover, closePool, closeHeap drop each once closed). t.mu is held.
func (t *Tier) keptOwn() bool {
	return t.engine.ownMover != nil || t.mem.ownPool && t.mem.pool != nil ||
		t.mem.ownHeap && t.mem.heap != nil
}

// kept reports whether a Close kept something the tier made, which a later Close tries to give
// back again (release): its own mover, host pool or device heap, or streams and events the
// driver refused to destroy. Meaningful once release ran. t.mu is held.
func (t *Tier) kept() bool {
	return t.keptOwn() || t.engine.h2d != 0 || t.engine.d2h != 0 || len(t.rel.idle) > 0
}

// destroyStreams destroys the tier's two streams and its events: its release events
// (t.rel.idle) and those idle in its event pool, which it then closes. What the driver refuses
// to destroy (a context with a sticky error refuses every call) is kept, in t.engine and
// t.rel.idle, for a later Close; what it destroyed is dropped, never destroyed twice. The
// refusals are said once. When lost, nothing is kept. t.mu is held.
func (t *Tier) destroyStreams(lost bool) error {
	var err error
	say := func(e error) {
		if e != nil {
			err = errkind.Once(err, e)
		}
	}
	for _, s := range []*cuda.Stream{&t.engine.h2d, &t.engine.d2h} {
		if *s == 0 {
			continue
		}
		say(t.dev.StreamSynchronize(uintptr(*s)))
		if derr := t.dev.StreamDestroy(uintptr(*s)); derr != nil {
			say(derr)
			if !lost {
				continue
			}
		}
		*s = 0
	}
	for n := t.engine.events.Idle(); n > 0; n-- { // under t.mu: no other Get takes one
		ev, gerr := t.engine.events.Get()
		if gerr != nil {
			break
		}
		t.rel.idle = append(t.rel.idle, cuda.Event(ev))
	}
	k := 0
	for _, ev := range t.rel.idle {
		if derr := t.dev.EventDestroy(uintptr(ev)); derr != nil {
			say(derr)
			if !lost {
				t.rel.idle[k] = ev
				k++
			}
		}
	}
	clear(t.rel.idle[k:])
	t.rel.idle = t.rel.idle[:k]
	if k == 0 {
		say(t.engine.events.Close()) // none idle: later Puts destroy theirs
	}
	if err == nil || lost {
		return err
	}
	var kept []string
	if n := btoi(t.engine.h2d != 0) + btoi(t.engine.d2h != 0); n > 0 {
		kept = append(kept, units.Count(uint64(n), "stream", "streams"))
	}
	if k > 0 {
		kept = append(kept, units.Count(uint64(k), "event", "events"))
	}
	return keptError("uvm: the driver refused to destroy "+strings.Join(kept, " and ")+
		" of the tier's, which it keeps", err)
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// keptError is Close's error when it keeps what (a part of the tier) after the driver's
// refusal err: a later Close tries again. A refusal of a failed device says so with
// ErrDeviceFault.
func keptError(what string, err error) error {
	if errors.Is(err, pinmalloc.ErrDeviceFault) && !errors.Is(err, ErrDeviceFault) {
		return fmt.Errorf("%w: %s: %w; a later Close tries again", ErrDeviceFault, strings.TrimPrefix(what, "uvm: "), err)
	}
	return fmt.Errorf("%s: %w; a later Close tries again", what, err)
}
