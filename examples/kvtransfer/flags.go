package main

import "fmt"

// The bounds of the flags: a request's blocks fit a pool each process holds twice over, and
// the copies and checks of a request take a moment, not minutes.
const (
	maxBlocks  = 4096      // KV blocks per request
	maxBlock   = 16 << 20  // bytes per block
	maxRequest = 256 << 20 // -blocks × -block: each pool holds twice it
)

// checkFlags says which flag is out of the range the example can run with, and what it can
// be, or returns nil.
func checkFlags(c config) error {
	switch {
	case c.blocks < 1 || c.blocks > maxBlocks:
		return fmt.Errorf("-blocks %d: want 1 to %d", c.blocks, maxBlocks)
	case c.block < 1 || c.block > maxBlock:
		return fmt.Errorf("-block %d: want 1 to %d bytes", c.block, maxBlock)
	case c.blocks*c.block > maxRequest: // no overflow within the bounds above
		return fmt.Errorf("-blocks %d × -block %d = %d bytes a request: want at most %d (%s: each process's pool holds twice it)",
			c.blocks, c.block, c.blocks*c.block, maxRequest, amount(maxRequest))
	case c.requests < 1:
		return fmt.Errorf("-requests %d: want 1 or more", c.requests)
	}
	return nil
}
