package ipcpool

import (
	"context"
)

// Keeper holds a pool's memory across its owner's restarts: it is attached like any process
// but allocates nothing, maps the whole pool faulted in and locked (so that its pages stay
// locked while no owner runs: the attached processes lock only what they touch), and keeps
// the pool's descriptors. When the owner dies, it waits for the next owner at the path (one
// started with Options.Adopt) and hands it the pool: the new owner maps it as it is, with no
// page faulted or pinned again. Run one in a small process of its own (cmd/keeper does), so
// that neither the owner's death nor any worker's takes the memory's locks with it. Its
// memlock limit must hold the whole pool.
type Keeper struct {
	p *Process
}

// Keep attaches a keeper to the pool served at path. ctx and o bound and configure the
// attach as for Attach (o.Pool is ignored: a keeper has no pool of buffers of its own).
func Keep(ctx context.Context, path string, o AttachOptions) (*Keeper, error) {
	o.Pool = defaultKeeperPool
	p, err := attach(ctx, path, o, lockNow)
	if err != nil {
		return nil, err
	}
	return &Keeper{p: p}, nil
}

// defaultKeeperPool is a keeper's pool: one shard, never used.
var defaultKeeperPool = keeperPool()

// Rejoined reports how many owners the keeper has handed the pool to or rejoined.
func (k *Keeper) Rejoined() int { return k.p.Rejoined() }

// ID returns the identity of the pool the keeper holds.
func (k *Keeper) ID() uint64 { return k.p.id }

// Close detaches the keeper; the pool's memory stays with the owner and the other processes.
func (k *Keeper) Close() error { return k.p.Close() }
