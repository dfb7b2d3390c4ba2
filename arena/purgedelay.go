//go:build !pinmalloc_probe

package arena

import "time"

// DefaultPurgeDelay is how long free chunks stay committed when Options.PurgeDelay is zero,
// mimalloc's purge delay; pinned pools and device heaps take it too.
const DefaultPurgeDelay = 10 * time.Millisecond
