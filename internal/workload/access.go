// Package workload generates the block access sequences that the UVM tier's benchmarks and
// examples run (streaming, uniform random and Zipf-popular), and records latencies in a
// histogram with bounded relative error.
//
// Every generator is deterministic: the same pattern, block count and seed give the same
// sequence on every run and every machine, so two policies or two runs see exactly the same
// accesses and their hit rates can be compared. Next makes no heap allocation.
package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// ErrInvalid is returned for a pattern, block count or parameter that cannot work.
var ErrInvalid = errors.New("workload: invalid argument")

// Pattern is a kind of access sequence over n blocks.
type Pattern uint8

const (
	// Streaming visits the blocks in order 0, 1, …, n-1 and starts again: a scan, the case
	// that defeats LRU once the blocks do not all fit.
	Streaming Pattern = iota
	// Random visits blocks uniformly at random.
	Random
	// Zipf visits block ranks with probability proportional to 1/(rank+1)^s (DefaultZipfS), the
	// ranks scattered over the blocks by a fixed permutation: a few blocks are hot, most cold.
	Zipf
)

// Patterns lists every pattern, in the order reports show them.
var Patterns = []Pattern{Streaming, Random, Zipf}

// DefaultZipfS is the Zipf exponent of New: about what request popularity in serving
// traces shows (math/rand's Zipf needs s > 1).
const DefaultZipfS = 1.1

// String returns the pattern's name: streaming, random or zipf.
func (p Pattern) String() string {
	switch p {
	case Streaming:
		return "streaming"
	case Random:
		return "random"
	case Zipf:
		return "zipf"
	}
	return fmt.Sprintf("Pattern(%d)", uint8(p))
}

// ParsePattern returns the pattern with the given name.
func ParsePattern(name string) (Pattern, error) {
	for _, p := range Patterns {
		if p.String() == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: pattern %q (want streaming, random or zipf)", ErrInvalid, name)
}

// Generator yields block indices in [0, N()).
type Generator interface {
	// Next returns the next block index.
	Next() int
	// N returns the number of blocks.
	N() int
}

// New returns a generator of pattern p over n blocks, seeded with seed (Zipf with exponent
// DefaultZipfS).
func New(p Pattern, n int, seed uint64) (Generator, error) {
	switch p {
	case Streaming:
		return NewStreaming(n)
	case Random:
		return NewRandom(n, seed)
	case Zipf:
		return NewZipf(n, DefaultZipfS, seed)
	}
	return nil, fmt.Errorf("%w: pattern %d", ErrInvalid, p)
}

func checkN(n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: %d blocks", ErrInvalid, n)
	}
	return nil
}

// newRand returns a PCG source seeded from seed (the second word is fixed, so one seed is all
// a caller gives).
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// StreamingGen is the Streaming pattern.
type StreamingGen struct{ n, i int }

// NewStreaming returns a scan over n blocks that starts at block 0.
func NewStreaming(n int) (*StreamingGen, error) {
	if err := checkN(n); err != nil {
		return nil, err
	}
	return &StreamingGen{n: n}, nil
}

// Next returns the block after the previous one, wrapping at N.
func (g *StreamingGen) Next() int {
	i := g.i
	if g.i++; g.i == g.n {
		g.i = 0
	}
	return i
}

// N returns the number of blocks.
func (g *StreamingGen) N() int { return g.n }

// RandomGen is the Random pattern.
type RandomGen struct {
	n int
	r *rand.Rand
}

// NewRandom returns uniform random accesses over n blocks.
func NewRandom(n int, seed uint64) (*RandomGen, error) {
	if err := checkN(n); err != nil {
		return nil, err
	}
	return &RandomGen{n: n, r: newRand(seed)}, nil
}

// Next returns a block chosen uniformly.
func (g *RandomGen) Next() int { return g.r.IntN(g.n) }

// N returns the number of blocks.
func (g *RandomGen) N() int { return g.n }

// ZipfGen is the Zipf pattern.
type ZipfGen struct {
	z    *rand.Zipf
	perm []int32 // rank → block
}

// NewZipf returns Zipf-distributed accesses over n blocks with a finite exponent s > 1: rank
// k is drawn with probability proportional to 1/(k+1)^s, and rank k is block Block(k), a
// fixed permutation drawn from the same seed, so hot blocks are not neighbours.
func NewZipf(n int, s float64, seed uint64) (*ZipfGen, error) {
	if err := checkN(n); err != nil {
		return nil, err
	}
	if !(s > 1) || math.IsInf(s, 1) || n > 1<<31-1 {
		return nil, fmt.Errorf("%w: Zipf exponent %g (want > 1) over %d blocks", ErrInvalid, s, n)
	}
	r := newRand(seed)
	perm := make([]int32, n)
	for i := range perm {
		perm[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	return &ZipfGen{z: rand.NewZipf(r, s, 1, uint64(n-1)), perm: perm}, nil
}

// Next returns the block of a Zipf-distributed rank.
func (g *ZipfGen) Next() int { return int(g.perm[g.z.Uint64()]) }

// Block returns the block of rank k (0 is the most popular).
func (g *ZipfGen) Block(k int) int { return int(g.perm[k]) }

// N returns the number of blocks.
func (g *ZipfGen) N() int { return len(g.perm) }
