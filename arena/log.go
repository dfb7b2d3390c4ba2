package arena

import (
	"context"
	"log/slog"
	"strconv"
)

// The arena's events for Options.Logger. They are rare by design (a region, a purge tick, a
// refusal), never on a path that runs per allocation, and each is one nil test when no logger
// is set. They are logged under the arena's lock: a handler must not call back into the arena.

// logReserve logs a region reserved (err nil) or refused.
func (a *Arena) logReserve(size, base uintptr, err error) {
	if a.log == nil {
		return
	}
	if err != nil {
		a.log.LogAttrs(context.Background(), slog.LevelWarn, "pinmalloc: region refused",
			slog.String("provider", a.st.Provider), slog.Uint64("size", uint64(size)),
			slog.Uint64("reserved", uint64(a.reserved)), slog.Uint64("capacity", uint64(a.capac)),
			slog.Any("error", err))
		return
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "pinmalloc: region reserved",
		slog.String("provider", a.st.Provider), slog.Uint64("size", uint64(size)),
		slog.String("base", hex(base)), slog.Uint64("reserved", uint64(a.reserved)),
		slog.Uint64("capacity", uint64(a.capac)))
}

// logPurge logs a purge (by the timer, or by Trim) that decommitted bytes.
func (a *Arena) logPurge(cause string, bytes uint64) {
	if a.log == nil || bytes == 0 {
		return
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "pinmalloc: "+cause,
		slog.String("provider", a.st.Provider), slog.Uint64("decommitted", bytes),
		slog.Uint64("committed", a.st.Committed))
}

// logRefused logs a commit the provider refused (the memlock limit, a driver error).
func (a *Arena) logRefused(r *region, glo, ghi int, err error) {
	if a.log == nil {
		return
	}
	a.log.LogAttrs(context.Background(), slog.LevelWarn, "pinmalloc: commit refused",
		slog.String("provider", a.st.Provider), slog.Uint64("size", uint64(ghi-glo)<<r.gshift),
		slog.Uint64("committed", a.st.Committed), slog.Any("error", err))
}

// logDecommitRefused logs a purge's decommit the provider refused: the memory stays committed
// and the next purge tries again, so a refusal that lasts would log at every tick; only the
// 1st, 2nd, 4th, 8th... refusal of the arena's life is logged, with the count so far.
func (a *Arena) logDecommitRefused(r *region, glo, ghi int, err error) {
	if n := a.st.DecommitsRefused; a.log == nil || n&(n-1) != 0 {
		return
	}
	a.log.LogAttrs(context.Background(), slog.LevelWarn, "pinmalloc: decommit refused",
		slog.String("provider", a.st.Provider), slog.Uint64("size", uint64(ghi-glo)<<r.gshift),
		slog.Uint64("refused", a.st.DecommitsRefused), slog.Uint64("committed", a.st.Committed),
		slog.Any("error", err))
}

// logForcedPurge logs a commit refused for want of memory, after which the arena gave back
// the memory waiting for the purge and tried again (err is the second try's result).
func (a *Arena) logForcedPurge(r *region, glo, ghi int, purged uint64, err error) {
	if a.log == nil {
		return
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	a.log.LogAttrs(context.Background(), level, "pinmalloc: forced purge",
		slog.String("provider", a.st.Provider), slog.Uint64("size", uint64(ghi-glo)<<r.gshift),
		slog.Uint64("decommitted", purged), slog.Uint64("committed", a.st.Committed),
		slog.Any("error", err))
}

func hex(p uintptr) string { return "0x" + strconv.FormatUint(uint64(p), 16) }
