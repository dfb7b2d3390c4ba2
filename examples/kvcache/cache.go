package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// sequence is one conversation's KV cache: token i lives in blocks[i/blockTokens], slot
// i%blockTokens, and every byte of its slot is stamp(id, i).
type sequence struct {
	id     int
	blocks []uvm.Handle
	n      int // tokens written
	length int // tokens when it ends
	last   int // the step that last decoded it (or started it)
}

// stamp is the byte every key/value byte of token tok of sequence id is set to.
func stamp(id, tok int) byte { return byte(id*251 + tok*7 + 3) }

// cache is the paged KV cache: slots of sequences, slot k drawn with Zipf popularity of rank k.
type cache struct {
	c       *config
	t       *uvm.Tier
	heap    *device.Heap // the tier's device heap: the step's device work goes through it
	s       cuda.Stream
	scratch cuda.DevicePtr
	target  uintptr // live KV bytes the cache may hold: liveBytes <= target always

	slots   []*sequence
	pick    *popularity
	lengths *rand.Rand
	chosen  []int // the slots of the current step

	liveBytes                                  uintptr
	nextID, started, finished, preempted, live int
	tokens, acquires                           int
	sumLive, peakLive                          float64 // over the steps, in bytes
	steps                                      int
	hist                                       latencies // of Acquire
}

func newCache(c *config, t *uvm.Tier, heap *device.Heap, s cuda.Stream, scratch cuda.DevicePtr, target uintptr) *cache {
	// Enough slots that fill's prompts fill the target and a fifth of the slots stay empty,
	// where new sequences start as others end.
	n := max(c.batch*2, int(1.25*float64(target)/float64(c.promptBlocks()*c.blockBytes())))
	return &cache{c: c, t: t, heap: heap, s: s, scratch: scratch, target: target, slots: make([]*sequence, n),
		pick:    newPopularity(n, c.zipfS, c.seed),
		lengths: rand.New(rand.NewPCG(c.seed, 0x6b76)), chosen: make([]int, 0, c.batch)}
}

// fill starts sequences in empty slots, in random order, until the cache has no room for
// another: the steady state of a server at capacity, which step then keeps (a sequence that
// grows preempts others, a new one starts when one ends).
func (k *cache) fill() error {
	for _, i := range k.lengths.Perm(len(k.slots)) {
		if !k.room() {
			break
		}
		if k.slots[i] == nil {
			if err := k.start(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// room reports whether a new sequence may start: its prompt and one more block fit.
func (k *cache) room() bool {
	return k.liveBytes+uintptr(k.c.promptBlocks()+1)*uintptr(k.c.blockBytes()) <= k.target
}

// step decodes one token of up to batch distinct sequences chosen by popularity; a chosen
// empty slot starts a new sequence (a prefill of its prompt) while the cache is below target.
func (k *cache) step() error {
	k.chosen = k.chosen[:0]
	for try := 0; len(k.chosen) < k.c.batch && try < 8*k.c.batch; try++ {
		i := k.pick.next()
		if seen(k.chosen, i) {
			continue
		}
		if k.slots[i] == nil {
			if !k.room() {
				continue // full: a new sequence waits until one ends
			}
			if err := k.start(i); err != nil {
				return err
			}
		} else if err := k.decode(i); err != nil {
			return err
		}
		k.chosen = append(k.chosen, i)
	}
	k.steps++
	k.sumLive += float64(k.liveBytes)
	k.peakLive = max(k.peakLive, float64(k.liveBytes))
	return nil
}

func seen(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// start puts a new sequence in slot i and writes its prompt's keys and values.
func (k *cache) start(i int) error {
	q := &sequence{id: k.nextID, length: k.c.minLen + k.lengths.IntN(k.c.maxLen-k.c.minLen+1), last: k.steps}
	k.nextID++
	k.slots[i] = q
	k.started++
	k.live++
	for q.n < k.c.prompt {
		if err := k.grow(q); err != nil {
			return err
		}
		last := q.blocks[len(q.blocks)-1]
		p, err := k.acquire(last, uvm.Write)
		if err != nil {
			return err
		}
		for end := min(k.c.prompt, (q.n/k.c.blockTokens+1)*k.c.blockTokens); q.n < end; q.n++ { // to the block's end
			if err := k.write(p, q); err != nil {
				return errors.Join(err, k.t.Release(last, k.s))
			}
		}
		if err := k.t.Release(last, k.s); err != nil {
			return err
		}
	}
	return nil
}

// grow adds a block to q when its next token starts one. When the cache is full it first
// preempts the sequences decoded least recently, as a server out of KV memory does (vLLM
// preempts and recomputes them later; here they are dropped), so the live KV bytes never pass
// the target.
func (k *cache) grow(q *sequence) error {
	if q.n%k.c.blockTokens != 0 {
		return nil
	}
	for k.liveBytes+uintptr(k.c.blockBytes()) > k.target {
		if err := k.preempt(q); err != nil {
			return err
		}
	}
	h, err := k.t.Alloc(k.c.blockBytes())
	if err != nil {
		return err
	}
	q.blocks = append(q.blocks, h)
	k.liveBytes += uintptr(k.c.blockBytes())
	return nil
}

// acquire is Acquire on the cache's stream, timed.
func (k *cache) acquire(h uvm.Handle, m uvm.Mode) (cuda.DevicePtr, error) {
	t0 := time.Now()
	p, err := k.t.Acquire(h, k.s, m)
	k.hist.record(time.Since(t0))
	k.acquires++
	return p, err
}

// write queues the memset that stores token q.n's keys and values into its slot of the block
// at p.
func (k *cache) write(p cuda.DevicePtr, q *sequence) error {
	off := uintptr(q.n%k.c.blockTokens) * uintptr(k.c.tokenBytes)
	k.tokens++
	return k.heap.MemsetAsync(p+cuda.DevicePtr(off), stamp(q.id, q.n), int(k.c.tokenBytes), k.s)
}

// decode appends one token to the sequence in slot i; the sequence ends, freeing its blocks,
// when it reaches its length.
func (k *cache) decode(i int) error {
	q := k.slots[i]
	q.last = k.steps
	if err := k.grow(q); err != nil {
		return err
	}
	if err := k.attend(q); err != nil {
		return err
	}
	if q.n++; q.n == q.length {
		return k.end(i)
	}
	return nil
}

// attend queues one decode step's device work on q's blocks: its last block acquired in write
// mode and token q.n's keys and values written to it, every other block acquired in read mode
// and copied to the scratch buffer (attention reading it). Every block is released before it
// returns, on success or not.
func (k *cache) attend(q *sequence) (err error) {
	last, held := len(q.blocks)-1, 0
	defer func() {
		for _, h := range q.blocks[:held] {
			err = errors.Join(err, k.t.Release(h, k.s))
		}
	}()
	for j, h := range q.blocks {
		m := uvm.Read
		if j == last {
			m = uvm.Write
		}
		p, err := k.acquire(h, m)
		if err != nil {
			return err
		}
		held++
		if j == last {
			err = k.write(p, q)
		} else {
			err = k.heap.DtoDAsync(k.scratch, p, int(k.c.blockBytes()), k.s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// preempt ends the live sequence other than keep that was decoded least recently.
func (k *cache) preempt(keep *sequence) error {
	victim := -1
	for i, q := range k.slots {
		if q != nil && q != keep && (victim < 0 || q.last < k.slots[victim].last) {
			victim = i
		}
	}
	if victim < 0 {
		return fmt.Errorf("sequence %d alone outgrows the cache's %d bytes", keep.id, k.target)
	}
	k.preempted++
	k.finished-- // end counts it as finished
	return k.end(victim)
}

// end frees the blocks of the sequence in slot i and empties the slot. The frees need no
// wait: the tier keeps a block's memory until the work released on the stream is done.
func (k *cache) end(i int) error {
	q := k.slots[i]
	k.slots[i] = nil
	k.finished++
	k.live--
	k.liveBytes -= uintptr(len(q.blocks) * k.c.blockBytes())
	return k.freeBlocks(q)
}

func (k *cache) freeBlocks(q *sequence) error {
	var errs []error
	for _, h := range q.blocks {
		errs = append(errs, k.t.Free(h))
	}
	q.blocks = nil
	return errors.Join(errs...)
}

// freeAll frees every live sequence's blocks.
func (k *cache) freeAll() error {
	var errs []error
	for _, q := range k.slots {
		if q != nil {
			errs = append(errs, k.freeBlocks(q))
		}
	}
	return errors.Join(errs...)
}

// verify reads every block of every live sequence on the host and compares each written
// slot with its stamp. It returns the number of blocks checked.
func (k *cache) verify() (int, error) {
	blocks := 0
	tb, bt := k.c.tokenBytes, k.c.blockTokens
	for _, q := range k.slots {
		if q == nil {
			continue
		}
		for j, h := range q.blocks {
			b, err := k.t.AcquireHost(h, uvm.Read)
			if err != nil {
				return blocks, err
			}
			for tok := j * bt; tok < min(q.n, (j+1)*bt); tok++ {
				want := stamp(q.id, tok)
				for x, v := range b[(tok%bt)*tb : (tok%bt+1)*tb] {
					if v != want {
						return blocks, errors.Join(fmt.Errorf("sequence %d token %d: byte %d is %#x, want %#x: the cache lost data", q.id, tok, x, v, want), k.t.ReleaseHost(h))
					}
				}
			}
			if err := k.t.ReleaseHost(h); err != nil {
				return blocks, err
			}
			blocks++
		}
	}
	return blocks, nil
}

// report prints what the run did, from the tier's stats before and after it.
func (k *cache) report(out io.Writer, st0, st uvm.Stats, el time.Duration) error {
	hits, misses := st.Hits-st0.Hits, st.Misses-st0.Misses
	if hits+misses == 0 {
		return errors.New("no acquisition counted by the tier")
	}
	in := st.Moved(true).Bytes - st0.Moved(true).Bytes
	out2 := (st.Moved(false).Bytes - st.CleanBytes) - (st0.Moved(false).Bytes - st0.CleanBytes) // copied: clean evictions move nothing
	sec := el.Seconds()
	fmt.Fprintf(out, "ran %d steps in %v: %d tokens (%.0f tokens/s), %d sequences started, %d ended, %d preempted (cache full), %d live\n",
		k.steps, el.Round(time.Millisecond), k.tokens, float64(k.tokens)/sec, k.started, k.finished, k.preempted, k.live)
	fmt.Fprintf(out, "KV bytes live: mean %.2f×, peak %.2f× the VRAM budget\n",
		k.sumLive/float64(k.steps)/float64(k.c.budget), k.peakLive/float64(k.c.budget))
	fmt.Fprintf(out, "acquires: %d, hit rate %.1f %% (%d hits, %d misses)\n", k.acquires, 100*float64(hits)/float64(hits+misses), hits, misses)
	fmt.Fprintf(out, "migrations: %d blocks in, %d out; %d MiB copied in (host→VRAM), %d MiB out (VRAM→host), %d clean evictions (host copy still current: no copy), %d blocks found thrashing (moved back and forth)\n",
		st.Moved(true).Blocks-st0.Moved(true).Blocks, st.Moved(false).Blocks-st0.Moved(false).Blocks,
		in>>20, out2>>20, st.CleanEvictions-st0.CleanEvictions, st.ThrashEvents-st0.ThrashEvents)
	fmt.Fprintf(out, "migration bandwidth: %.2f GB/s averaged over the run (the tier copies only on misses, overlapped with the step's work)\n",
		float64(in+out2)/sec/1e9)
	fmt.Fprintf(out, "Acquire latency: p50 %v, p99 %v, max %v (the call that makes a block resident in VRAM and gives its address)\n",
		round3(k.hist.quantile(0.5)), round3(k.hist.quantile(0.99)), round3(k.hist.max()))
	return nil
}

// round3 rounds d to three significant digits, so that it prints as 53.2ms, not 53.173691ms.
func round3(d time.Duration) time.Duration {
	for r := time.Duration(1); r < time.Hour; r *= 10 {
		if d < 1000*r {
			return d.Round(r)
		}
	}
	return d.Round(time.Second)
}
