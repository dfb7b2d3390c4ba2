package main

import (
	"errors"
	"fmt"
	"math"
)

// The bounds of the flags: every product of them fits an int, and a run with the defaults'
// -steps takes seconds on the fake driver, which the number of blocks in the cache decides.
const (
	minBudget   = 1 << 20  // -budget
	maxBudget   = 64 << 30 // -budget: 8× it, in blocks of at most 16 MiB, is maxCacheBlocks
	maxTokens   = 1024     // -block-tokens
	maxToken    = 16 << 20 // -token-bytes
	maxLength   = 1 << 20  // -max-len, in tokens
	maxBatch    = 1024     // -batch
	maxZipf     = 100      // -zipf: above it the first slot is drawn every time
	cacheBlocks = 32768    // blocks in the cache (-oversub × -budget): the fill starts a sequence for every few
)

// checkFlags says which flag of c (with budget, -budget as given) is out of the range the
// example can run with, and what it can be, or returns nil.
func checkFlags(c *config, budget int) error {
	switch {
	case c.policyFactory == nil:
		return fmt.Errorf("-policy %q: want lru or 2q", c.policy)
	case !(c.zipfS > 1 && c.zipfS <= maxZipf): // also NaN
		return fmt.Errorf("-zipf %g: want an exponent above 1, at most %d", c.zipfS, maxZipf)
	case !(c.oversub >= 1 && c.oversub <= 8):
		return fmt.Errorf("-oversub %g: want 1 to 8", c.oversub)
	case budget < minBudget || budget > maxBudget:
		return fmt.Errorf("-budget %d: want %d to %d bytes (1 MiB to 64 GiB)", budget, minBudget, maxBudget)
	case c.blockTokens < 1 || c.blockTokens > maxTokens:
		return fmt.Errorf("-block-tokens %d: want 1 to %d", c.blockTokens, maxTokens)
	}
	// A cache of many small blocks makes a run slow: -token-bytes 1 put 3.5 million sequence
	// slots in the default 128 MiB.
	target := c.oversub * float64(budget)
	least := max(1, int(math.Ceil(target/float64(cacheBlocks*c.blockTokens))))
	switch {
	case c.tokenBytes < least || c.tokenBytes > maxToken:
		return fmt.Errorf("-token-bytes %d: want %d to %d with -block-tokens %d and a %s cache (-oversub × -budget: at most %d blocks)",
			c.tokenBytes, least, maxToken, c.blockTokens, size(int(target)), cacheBlocks)
	case c.batch < 1 || c.batch > maxBatch:
		return fmt.Errorf("-batch %d: want 1 to %d", c.batch, maxBatch)
	case c.steps < 1:
		return fmt.Errorf("-steps %d: want 1 or more", c.steps)
	case c.maxLen > maxLength:
		return fmt.Errorf("-max-len %d: want at most %d tokens", c.maxLen, maxLength)
	case c.minLen <= c.prompt || c.maxLen < c.minLen || c.prompt <= 0:
		return errors.New("want 0 < -prompt < -min-len <= -max-len")
	}
	return nil
}
