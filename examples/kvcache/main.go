// Kvcache is a paged KV cache for many sequences on pinmalloc's UVM tier, the way an LLM
// server keeps attention keys and values: each sequence owns fixed-size blocks of -block-tokens
// tokens, decoding appends one token to its last block and reads all the others, and the
// sequences' blocks together outgrow the VRAM budget by -oversub (1 to 8, typically 1.5–4×).
// The tier keeps the hot blocks in VRAM and the cold ones in pinned host memory, and moves
// them in stream order.
//
//	go run ./examples/kvcache                          # 2× a 64 MiB budget, LRU
//	go run ./examples/kvcache -oversub 4 -policy 2q -steps 5000
//
// The cache holds at most -oversub × -budget bytes of KV (live sequences' blocks, in VRAM or
// on the host). It starts full: sequences with their prompts prefilled in random slots until
// no other fits (the steady state of a server at capacity). Then each step picks -batch
// sequences by Zipf popularity (a few conversations are hot, most are cold) and, for each,
// acquires its blocks on a stream (write mode for the block the new token goes to, read mode
// for the rest), queues the step's device work (a memset writes the token's keys and values
// into its slot; a device-to-device copy of every other block stands for attention reading
// them), and releases them. A sequence that reaches its length ends and frees its blocks; one
// that needs a block when the cache is full preempts the sequences decoded least recently (a
// server would recompute them later; here they are dropped); a chosen empty slot starts a new
// sequence when its prompt fits. At the end every block of every live sequence is read back
// on the host and compared with what was written, and the tier's byte accounting is checked
// against the cache's.
//
// It prints the hit rate, the migrations each way, the bandwidth they averaged over the run
// and the p50/p99 latency of Acquire (which queues a migration but never waits for one).
// Without a GPU it runs again on pinmalloc's fake CUDA driver (cudatest.ExecOnFake: compiled
// with gcc at start, device memory simulated in host memory) and says so: the figures are
// then those of memcpy on the CPU.
//
// It uses public names only, so it can be copied out of the repository: the tier shares a
// device.Heap with the program (uvm.Options.Heap), and the step's device work (memsets and
// copies standing for a model's kernels) goes through that heap's MemsetAsync and DtoDAsync.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/uvm"
)

func main() {
	// The flags first: -h or a bad flag needs no driver, fake or real.
	if _, err := parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "kvcache:", err) // a flag out of its range: said at once, exit 2 as flag does
		os.Exit(2)
	}
	if _, err := cuda.Count(); errors.Is(err, cuda.ErrNoDriver) && os.Getenv(cuda.LibraryEnv) == "" {
		// A process loads its driver once: run again, on the fake.
		fmt.Fprintf(os.Stderr, "kvcache: %v\nkvcache: trying pinmalloc's fake driver instead\n", err)
		code, err := cudatest.ExecOnFake()
		if err != nil {
			log.Fatalf("kvcache: %v", err)
		}
		os.Exit(code)
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		log.Fatal(err)
	}
}

// config is what the flags decide.
type config struct {
	budget        uintptr // VRAM budget of the tier
	oversub       float64 // live KV bytes / budget the cache is kept at
	blockTokens   int     // tokens per block
	tokenBytes    int     // bytes of keys and values per token (all layers)
	minLen        int     // a sequence's length is drawn from [minLen, maxLen] tokens
	maxLen        int
	prompt        int // tokens of a new sequence's prompt (prefilled at once)
	batch, steps  int
	zipfS         float64
	seed          uint64
	policy        string
	policyFactory func() uvm.Policy
}

// policies maps -policy to the tier's eviction policies.
var policies = map[string]func() uvm.Policy{"lru": uvm.LRU, "2q": uvm.TwoQ}

func parse(args []string) (*config, error) {
	fs := flag.NewFlagSet("kvcache", flag.ContinueOnError)
	c := &config{}
	budget := fs.Int("budget", 64<<20, "VRAM bytes the tier may hold")
	fs.Float64Var(&c.oversub, "oversub", 2, "live KV bytes as a multiple of the budget (1 to 8; 1.5 to 4 is typical)")
	fs.IntVar(&c.blockTokens, "block-tokens", 16, "tokens per KV block")
	fs.IntVar(&c.tokenBytes, "token-bytes", 4096, "bytes of keys and values per token")
	fs.IntVar(&c.minLen, "min-len", 64, "shortest sequence, in tokens")
	fs.IntVar(&c.maxLen, "max-len", 1024, "longest sequence, in tokens")
	fs.IntVar(&c.prompt, "prompt", 48, "prompt tokens of a new sequence")
	fs.IntVar(&c.batch, "batch", 8, "sequences decoded per step")
	fs.IntVar(&c.steps, "steps", 500, "decode steps")
	fs.Float64Var(&c.zipfS, "zipf", zipfDefault, "Zipf exponent of sequence popularity (above 1, at most 100)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the popularity and the lengths")
	fs.StringVar(&c.policy, "policy", "lru", "eviction policy: lru or 2q (scan-resistant)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kvcache [flags]\n\n"+
			"A paged KV cache for many sequences on pinmalloc's UVM tier: -oversub times more KV than\n"+
			"the -budget of VRAM, hot blocks kept on the device, cold ones in pinned host memory, moved\n"+
			"in stream order. Each of -steps decodes one token of -batch sequences drawn by Zipf\n"+
			"popularity; at the end every byte is read back and checked. It prints the hit rate, the\n"+
			"migrations, their bandwidth and Acquire's latency. Without a GPU it runs on pinmalloc's\n"+
			"fake driver (built with gcc): the figures are then the CPU's, not a GPU's.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.budget = uintptr(max(*budget, 0))
	c.policyFactory = policies[c.policy]
	if err := checkFlags(c, *budget); err != nil {
		return nil, err
	}
	switch { // within checkFlags' bounds, no product overflows
	case c.maxBlocks()*c.blockBytes() > int(c.budget)/2:
		// A decode holds every block of a sequence acquired at once: half the budget leaves
		// room for the copies in flight, so that Acquire never finds it all pinned.
		return nil, fmt.Errorf("the longest sequence (%d blocks of %d bytes) needs more than half the %d-byte budget", c.maxBlocks(), c.blockBytes(), c.budget)
	case float64(c.maxBlocks()+c.promptBlocks()+1)*float64(c.blockBytes()) > c.oversub*float64(c.budget):
		return nil, errors.New("the cache (-oversub × -budget) cannot hold the longest sequence and a new one")
	}
	return c, nil
}

func (c *config) blockBytes() int { return c.blockTokens * c.tokenBytes }

// maxBlocks is the number of blocks of the longest sequence.
func (c *config) maxBlocks() int { return (c.maxLen + c.blockTokens - 1) / c.blockTokens }

// promptBlocks is the number of blocks a new sequence's prompt fills.
func (c *config) promptBlocks() int { return (c.prompt + c.blockTokens - 1) / c.blockTokens }

func run(args []string, out io.Writer) (err error) {
	c, err := parse(args)
	if err != nil {
		return err
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return fmt.Errorf("kvcache: opening device 0: %w", err)
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	name, err := dev.Name()
	if err != nil {
		return err
	}
	if cudatest.IsFake(dev) {
		fmt.Fprintf(out, "device: %s — pinmalloc's fake CUDA driver, NO GPU: device memory is simulated in host memory and every copy is a CPU memcpy, so the figures below are CPU-bound\n", name)
	} else {
		fmt.Fprintf(out, "device: %s\n", name)
	}
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.StreamDestroy(s)) }()

	// One device heap for the tier and the program's own scratch block, with room for both; its
	// memory stays committed (PurgeDelay -1), as a heap shared with a tier should.
	const chunk = 2 << 20
	heap, err := device.New(dev, device.Options{Capacity: int((c.budget + uintptr(c.blockBytes()) + 2*chunk - 1) &^ (chunk - 1)), PurgeDelay: -1})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, heap.Close()) }()
	scratch, err := heap.Alloc(int(c.blockBytes()), s) // where "attention" copies the blocks it reads
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, heap.FreeAsync(scratch, s), heap.ForgetStream(s)) }()

	target := uintptr(c.oversub * float64(c.budget))
	t, err := uvm.New(dev, uvm.Options{
		DeviceBudget: int(c.budget),
		HostCapacity: int(target), // the live KV bytes never pass it: the host can hold all of them
		Policy:       c.policyFactory(),
		Heap:         heap,
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, t.Close()) }()

	k := newCache(c, t, heap, s, scratch, target)
	defer func() { err = errors.Join(err, k.freeAll()) }()
	fmt.Fprintf(out, "cache: %d MiB VRAM budget, KV kept at %.2g× it (%d MiB), blocks of %s (%d tokens × %d B), eviction policy %s, %d sequence slots picked by Zipf(%.2g) popularity\n",
		c.budget>>20, c.oversub, target>>20, size(c.blockBytes()), c.blockTokens, c.tokenBytes, c.policy, len(k.slots), c.zipfS)

	if err := k.fill(); err != nil {
		return err
	}
	if err := errors.Join(t.Sync(), dev.StreamSynchronize(s)); err != nil {
		return err
	}
	filled := k.started
	k.hist.reset()
	k.acquires, k.tokens = 0, 0
	fmt.Fprintf(out, "prefilled %d sequences (%d MiB of KV); now %d decode steps of %d sequences\n", filled, k.liveBytes>>20, c.steps, c.batch)

	st0 := t.Stats()
	start := time.Now()
	for range c.steps {
		if err := k.step(); err != nil {
			return err
		}
	}
	if err := errors.Join(t.Sync(), dev.StreamSynchronize(s)); err != nil {
		return err
	}
	el := time.Since(start)
	st := t.Stats()
	if err := k.report(out, st0, st, el); err != nil {
		return err
	}
	blocks, err := k.verify()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "verified: every byte of the %d blocks of the %d live sequences is what was written\n", blocks, k.live)
	return account(out, t.Stats(), k.liveBytes, c.budget)
}

// account checks the tier's byte accounting against the cache's and prints where the bytes are:
// the tier holds exactly the live sequences' blocks, split between VRAM (within the budget), the
// host and fresh blocks, and none stays acquired.
func account(out io.Writer, st uvm.Stats, live, budget uintptr) error {
	switch {
	case st.LiveBytes != uint64(live):
		return fmt.Errorf("the tier holds %d bytes live, the cache's sequences %d", st.LiveBytes, live)
	case st.DeviceBytes+st.HostBytes+st.FreshBytes != st.LiveBytes:
		return fmt.Errorf("the tier's bytes do not add up: %d in VRAM + %d on the host + %d fresh != %d live",
			st.DeviceBytes, st.HostBytes, st.FreshBytes, st.LiveBytes)
	case st.DeviceBytes > uint64(budget):
		return fmt.Errorf("the tier holds %d bytes of VRAM, above its %d-byte budget", st.DeviceBytes, budget)
	case st.AcquiredBlocks != 0:
		return fmt.Errorf("%d blocks still acquired after the run", st.AcquiredBlocks)
	}
	fmt.Fprintf(out, "accounted: %d MiB live = %d MiB in VRAM + %d MiB on the host only + %d MiB fresh (allocated, never used yet: no storage)\n",
		st.LiveBytes>>20, st.DeviceBytes>>20, st.HostBytes>>20, st.FreshBytes>>20)
	return nil
}
