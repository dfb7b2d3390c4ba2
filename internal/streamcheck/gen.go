package streamcheck

import "math/rand/v2"

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// weights are how often the generator draws each operation (per mille, about), by profile.
type weights [numKinds]int

// baseWeights are the weights of a configuration with no profile.
var baseWeights = weights{
	DevAlloc: 80, DevWrite: 90, DevRead: 60, DevMemset: 30, DevFreeAsync: 60, DevFree: 20, DevDoubleFree: 5, DevOutOfBounds: 5,
	PoolAlloc: 80, PoolStamp: 20, PoolFree: 30, PoolFreeAsync: 30, PoolRecordFree: 20, PoolRawCopy: 20, PoolDoubleFree: 5, PoolSubFree: 5,
	TierAlloc: 30, TierAcquire: 70, TierRelease: 55, TierWrongRelease: 5, TierHost: 25, TierEvict: 15, TierPrefetch: 10, TierFree: 15, TierDoubleFree: 3,
	Sync: 60, Hold: 15, Complete: 8, CompleteStream: 10, HeapTrim: 8, HeapSync: 5, PoolTrim: 5, Stats: 10, TierSync: 5, Recreate: 8,
}

// weightsFor returns the weights of cfg's profiles: the base ones, with PoolRawFree in the
// legacy mix (frees ordered by the legacy stream alone), more device churn and fewer
// synchronizes under device pressure, more tier traffic under host pressure.
func weightsFor(cfg Config) weights {
	w := baseWeights
	if cfg.Legacy {
		w[PoolRawFree] = 25
		w[Stats] += 10 // a reclaim soon after such a free, before the legacy stream has run
	}
	w[ArenaTrim] = 6
	if cfg.Pressure {
		w[ArenaTrim] = 15
		w[DevAlloc], w[DevFreeAsync], w[DevFree], w[DevMemset] = 160, 130, 10, 50
		w[Sync], w[Complete], w[CompleteStream], w[HeapSync] = 25, 3, 4, 2
		w[Hold] = 25
	}
	if cfg.TierHostQuota > 0 {
		// Prefetches (clean blocks whose restore stays queued while Hold is on) and host
		// acquisitions (buffers written by the CPU at once) against a full host pool.
		w[TierAlloc], w[TierAcquire], w[TierRelease], w[TierEvict], w[TierPrefetch], w[TierHost] = 45, 90, 80, 35, 60, 60
		w[Hold] = 30
	}
	return w
}

// draw returns a kind drawn by the weights.
func (ws *weights) draw(r *rand.Rand) Kind {
	total := 0
	for _, w := range ws {
		total += w
	}
	x := r.IntN(total)
	for k, w := range ws {
		if x < w {
			return Kind(k)
		}
		x -= w
	}
	return Sync
}

// devSize draws a device block size: mostly small, some object pages, a few huge blocks
// (above heap.HugeThreshold, 1 MiB), which every free defers behind an event, some of them
// larger than a segment, which a small heap often cannot serve: the allocating stream's heap
// then gives its empty segments back to the arena, where other streams take them.
func devSize(r *rand.Rand, pressure bool) int {
	x := r.IntN(100)
	if pressure && x >= 50 {
		// Under device pressure, as many requests beyond a segment as small ones: each finds
		// the arena short, where a heap that gave its memory away would do it.
		x = 94
	}
	switch {
	case x < 40:
		return 1 + r.IntN(8<<10)
	case x < 65:
		return 16<<10 + r.IntN(112<<10)
	case x < 85:
		return 200<<10 + r.IntN(500<<10)
	case x < 91:
		return 800<<10 + r.IntN(224<<10)
	case x < 94:
		return 1<<20 + 1 + r.IntN(512<<10)
	default: // more than a 2 MiB segment: in a small heap, often more than the arena has left
		return 2<<20 + r.IntN(1536<<10)
	}
}

func poolSize(r *rand.Rand) int {
	switch x := r.IntN(100); {
	case x < 40:
		return 1 + r.IntN(4<<10)
	case x < 70:
		return 8<<10 + r.IntN(88<<10)
	case x < 90:
		return 200<<10 + r.IntN(400<<10)
	default:
		return 900<<10 + r.IntN(300<<10)
	}
}

var tierSizes = []int{4 << 10, 16<<10 + 100, 64 << 10, 200 << 10}

// tierSize draws a tier block's size: any of tierSizes, or under host pressure mostly one, so
// that a host buffer the tier gives up is the one its next block takes.
func (w *world) tierSize(r *rand.Rand) int {
	if w.cfg.TierHostQuota > 0 && r.IntN(4) != 0 {
		return tierSizes[2]
	}
	return tierSizes[r.IntN(len(tierSizes))]
}

// gen draws the next operation for the world's state: mostly valid ones (on the stream the
// objects are busy on), sometimes on another stream, which the contract may forbid (apply
// skips those). With a ZeroOnFree heap, one in reuseFreeEvery is a hand-over (DevReuseFree)
// in place of the operation drawn, which side draws: the sequence r draws stays the seed's.
func (w *world) gen(r *rand.Rand, id int) Op {
	op := w.drawOp(r, id)
	if w.cfg.DeviceZero && w.side.IntN(reuseFreeEvery) == 0 {
		return w.genReuseFree(w.side, id)
	}
	return op
}

// drawOp draws the next operation by the weights.
func (w *world) drawOp(r *rand.Rand, id int) Op {
	op := Op{ID: id, Kind: w.weights.draw(r), S: r.IntN(len(w.streams)), A: -1, B: -1, V: uint32(r.Uint32())}
	pick := func(ids []int) int {
		if len(ids) == 0 {
			return -1
		}
		return ids[r.IntN(len(ids))]
	}
	// on moves the operation to the stream an object is busy on, most of the time.
	// With the legacy mix, it is sometimes a stream ordered after that one instead.
	on := func(busy int) {
		if busy >= 0 && r.IntN(5) != 0 {
			op.S = busy
			if w.cfg.Legacy && r.IntN(3) == 0 {
				op.S = w.orderedAfter(r, busy)
			}
		}
	}
	switch op.Kind {
	case DevAlloc:
		op.N = devSize(r, w.cfg.Pressure)
		op.Flag = w.cfg.DeviceZero && r.IntN(2) == 0
	case DevWrite, DevRead, DevMemset, PoolRawCopy:
		a := pick(w.devID)
		op.A = a
		if d := w.dev[a]; d != nil {
			on(d.busy)
			op.N = 1 + r.IntN(d.n)
			if r.IntN(2) == 0 {
				op.Off = r.IntN(d.n)
			}
		}
		if op.Kind != DevMemset && r.IntN(4) != 0 {
			if op.B = pick(w.bufID); op.B >= 0 && w.bufs[op.B].busy >= 0 && r.IntN(2) == 0 {
				op.S = w.bufs[op.B].busy
			}
		}
		if op.Kind == PoolRawCopy {
			op.A, op.B = op.B, op.A
			if op.A < 0 {
				op.A = pick(w.bufID)
			}
		}
	case DevFreeAsync, DevFree, DevDoubleFree, DevOutOfBounds:
		op.A = pick(w.devID)
		if d := w.dev[op.A]; d != nil {
			on(d.busy)
			op.Off = r.IntN(d.n)
		}
	case PoolAlloc:
		op.N = poolSize(r)
	case PoolStamp, PoolFree, PoolFreeAsync, PoolRecordFree, PoolDoubleFree, PoolSubFree:
		op.A = pick(w.bufID)
		if bf := w.bufs[op.A]; bf != nil {
			op.Off = r.IntN(len(bf.b))
			op.N = 1 + r.IntN(len(bf.b))
			if r.IntN(2) == 0 {
				on(bf.busy)
			}
		}
	case PoolRawFree:
		op.A, op.B, op.Flag = pick(w.bufID), pick(w.devID), r.IntN(2) == 0
		if bf := w.bufs[op.A]; bf != nil {
			on(bf.busy)
			op.N = 1 + r.IntN(len(bf.b))
		}
		op.T = op.S
		if l := w.legacySlot(); l >= 0 && r.IntN(2) == 0 {
			// The case the legacy order alone makes safe: the copy on the legacy stream, the
			// free on a blocking stream with nothing queued, whose own query finds it idle.
			op.S = l
			for op.T = r.IntN(w.cfg.Streams); !w.blocking(op.T); op.T = (op.T + 1) % w.cfg.Streams {
			}
		} else if w.cfg.Legacy {
			op.T = w.orderedAfter(r, op.S)
		}
	case TierAlloc:
		op.N = w.tierSize(r)
	case TierAcquire:
		op.A = pick(w.tbID)
		if u := w.tb[op.A]; u != nil {
			if u.pins > 0 {
				op.S = u.acq
			} else {
				on(u.busy)
			}
		}
		op.Flag = r.IntN(2) == 0
		if op.Flag && r.IntN(2) == 0 {
			op.B = pick(w.bufID)
		}
	case TierRelease:
		var pinned []int
		for _, id := range w.tbID {
			if w.tb[id].pins > 0 {
				pinned = append(pinned, id)
			}
		}
		op.A = pick(pinned)
	case TierWrongRelease, TierHost, TierFree, TierDoubleFree:
		op.A = pick(w.tbID)
		op.Flag = r.IntN(2) == 0
	case TierEvict, TierPrefetch:
		op.A, op.B, op.Off = pick(w.tbID), pick(w.tbID), pick(w.tbID)
	case Hold:
		op.Flag = r.IntN(3) == 0
	}
	return op
}

// orderedAfter draws a stream slot whose work queued now runs after slot b's queued before:
// b itself, the legacy stream for a blocking b, a blocking stream for the legacy one.
func (w *world) orderedAfter(r *rand.Rand, b int) int {
	var ks []int
	for k := range w.streams {
		if w.ordered(b, k) {
			ks = append(ks, k)
		}
	}
	return ks[r.IntN(len(ks))]
}
