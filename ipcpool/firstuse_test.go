package ipcpool

import (
	"path/filepath"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fence"
)

// A process's first Attach pays the process's one-time membarrier registration (pinned.New's
// fast paths: a wait for an RCU grace period, seconds on a busy machine) before it connects to
// the owner: within the handshake it would count against the owner's Timeout, and the owner
// would give up an honest process for the machine being busy (its ready too late: ErrRefused,
// a broken pipe).
func TestAttachRegistersBeforeItConnects(t *testing.T) {
	if !fence.Available() {
		t.Skip("no membarrier registration here (or the race detector): nothing to pay")
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 8 << 20, GrantSize: 2 << 20, FallbackPageable: true})
	must(t, "Serve", err)
	defer func() { must(t, "Close the owner", w.Close()) }()
	c := startChild(t, path, childQuietEnv+"=1", childFirstUseEnv+"=1") // fails on an E line
	c.quit(t)
}
