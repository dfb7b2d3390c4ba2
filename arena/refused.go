package arena

import (
	"context"
	"fmt"
	"log/slog"
)

// # Refused releases
//
// A provider that refuses to release a region (Provider.Release: a driver call refused during
// a capture, a transient failure) keeps what it could not give back with the region, so that a
// later Release of it tries again. The arena keeps such a region in a.refused: out of
// a.regions, so that Lookup finds none of its chunks and no span is placed in it, its reserved
// and committed bytes still counted (a.reserved, Stats.Committed: it holds memory, and counts
// against the capacity), Stats.RegionsRefused says how many. It releases each again at every
// purge tick, at Trim, at Close, and at an Alloc or Reserve that finds no capacity (or no
// memory) left, once, before it fails; Close returns an error wrapping ErrReleaseRefused while
// one is still refused, and the next Close tries again. While nothing else keeps the timer ticking,
// a refused region keeps it armed, backing off (refused_retry.go).

// refusedRegion is a region the provider refused to release.
type refusedRegion struct {
	r         *Region
	committed uint64 // what of it the arena counts in Stats.Committed
	idle      bool   // released empty (releaseIdle): counted in Stats.RegionsReleased once released
	logged    bool   // its refusal was logged: its release is too
}

// keepRefused keeps rr, whose release the provider refused with err, for a later release, and
// returns err wrapped in ErrReleaseRefused. a.reserved and Stats.Committed must count rr's size
// and committed bytes, as they do for a region of a.regions. Called under a.mu.
func (a *Arena) keepRefused(rr *Region, committed uint64, idle bool, err error) error {
	x := refusedRegion{r: rr, committed: committed, idle: idle, logged: true}
	if len(a.refused) == 0 {
		a.retryWait = a.delay // the first wait of the backoff
	}
	a.refused = append(a.refused, x)
	err = a.refusal(rr, err)
	a.logRelease(rr, err)
	a.scheduleRetry()
	return err
}

// refusal wraps err, the provider's refusal to release rr, in ErrReleaseRefused.
func (a *Arena) refusal(rr *Region, err error) error {
	return fmt.Errorf("%w: region [%#x, +%d) of provider %s (kept, released again later): %w",
		ErrReleaseRefused, rr.Base, rr.Size, a.prov.Name(), err)
}

// releaseRefused releases again the regions the provider refused to release (and, at Close,
// the arena's last regions), keeps those it refuses again and returns the first such refusal,
// wrapped in ErrReleaseRefused. A refusal is logged once per region. Called under a.mu.
func (a *Arena) releaseRefused() error {
	if len(a.refused) == 0 {
		return nil
	}
	var first error
	kept := a.refused[:0]
	for _, x := range a.refused {
		if err := a.prov.Release(x.r); err != nil {
			err = a.refusal(x.r, err)
			if first == nil {
				first = err
			}
			if !x.logged {
				a.logRelease(x.r, err)
				x.logged = true
			}
			kept = append(kept, x)
			continue
		}
		a.reserved -= x.r.Size
		a.st.Committed -= x.committed
		if x.idle {
			a.st.RegionsReleased++
		}
		if x.logged {
			a.logRelease(x.r, nil)
		}
	}
	clear(a.refused[len(kept):])
	a.refused = kept
	if first != nil {
		a.backOff()
	} else if a.retryArmed && a.timer.Stop() {
		// None left (Trim): the timer armed for them alone, after a wait backed off up to a
		// minute, stops, so that the next refusal starts the backoff afresh.
		a.retryArmed = false
	}
	return first
}

// logRelease logs a region given back, or (err) one the provider refused to release, which the
// arena keeps and releases again later.
func (a *Arena) logRelease(r *Region, err error) {
	if a.log == nil {
		return
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	a.log.LogAttrs(context.Background(), level, "pinmalloc: region released",
		slog.String("provider", a.st.Provider), slog.Uint64("size", uint64(r.Size)),
		slog.String("base", hex(r.Base)), slog.Uint64("reserved", uint64(a.reserved)),
		slog.Int("refused", len(a.refused)), slog.Any("error", err))
}
