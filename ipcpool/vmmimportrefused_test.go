package ipcpool

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// An Attach to a VMM pool whose regions the driver refuses to import fails with ErrRefused,
// the driver's error kept and "ipcpool" said once, and leaves no descriptor of the pool open.
// The server here sends a plain memfd as the region: the fake driver imports only its own
// exports, as the driver imports only its own. (The import's refusal had no test.)
func TestFakeVMMImportRefusedIsErrRefused(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	h := hello{pool: 7, slot: 1, serial: 1, vmm: true, layout: layout{regions: 1, regionSize: 2 << 20,
		grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}}
	h.ctlSize = h.ctlBytes()
	fds := memfds(t, h.ctlSize, h.regionSize)
	path := fakeServer(t, func(conn *net.UnixConn) {
		if _, err := readMsg(conn); err != nil {
			return
		}
		_ = sendFds(conn, h.encode(), fds, time.Second)
		_, _ = readMsg(conn) // the abort
	})
	before := openFds(t)
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost, Timeout: time.Second})
	if err == nil {
		_ = p.Close()
	}
	if !errors.Is(err, ErrRefused) || !errors.Is(err, pcuda.ErrInvalidValue) || strings.Count(err.Error(), "ipcpool") != 1 {
		t.Fatalf("Attach to a VMM pool whose region the driver refuses to import: %v; want ErrRefused, "+
			"the driver's invalid value kept, \"ipcpool\" said once", err)
	}
	waitFor(t, func() bool { return openFds(t) <= before }) // (the fake server's end closes as the connection ends)
}
