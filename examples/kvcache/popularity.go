package main

import "math/rand/v2"

// zipfDefault is -zipf's default: about the request popularity serving traces show
// (math/rand's Zipf needs an exponent above 1).
const zipfDefault = 1.1

// popularity draws slots with Zipf popularity: rank k is drawn with probability proportional
// to 1/(k+1)^s, and rank k is a slot of a fixed permutation drawn from the same seed, so the hot
// slots are not neighbours. The same n, s and seed give the same draws on every run.
type popularity struct {
	z    *rand.Zipf
	perm []int // rank → slot
}

// newPopularity returns draws over n slots with exponent s > 1 (parse checks it).
func newPopularity(n int, s float64, seed uint64) *popularity {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	perm := r.Perm(n)
	return &popularity{z: rand.NewZipf(r, s, 1, uint64(n-1)), perm: perm}
}

// next returns the slot of a Zipf-distributed rank.
func (p *popularity) next() int { return p.perm[p.z.Uint64()] }
