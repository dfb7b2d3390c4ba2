package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"math/bits"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// goneSegment returns the id of a SysV segment that was made and removed: it names none.
func goneSegment(t *testing.T) uint32 {
	t.Helper()
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); err != nil {
		t.Fatal(err)
	}
	var ds unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err == nil {
		t.Fatalf("SysV segment %d is still there", id)
	}
	return uint32(id)
}

// withSysvID returns d's key with the segment id of its sysv memory domain (as c's endpoint
// names its lanes' domains) set to id.
func withSysvID(t *testing.T, c *Conn, d Descriptor, id uint32) string {
	t.Helper()
	c.w.mu.Lock()
	mds, err := c.laneMDs()
	c.w.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(d.rkey)
	p := rkeyFixed
	for m := binary.NativeEndian.Uint64(key); m != 0; m &= m - 1 {
		n := int(key[p])
		if mds[bits.TrailingZeros64(m)] == "sysv" {
			binary.NativeEndian.PutUint32(key[p+1:], id)
			return string(key)
		}
		p += 1 + n
	}
	t.Fatalf("no sysv key in % x", key)
	return ""
}

// TestForgedShmKeyRefused: over shared memory, a descriptor whose region's sysv key names a
// segment that is not there, forged or an honest peer's whose pool released the region
// before this process first used it, is refused with ErrDescriptor, and a posix key of
// length 0 too, before UCX unpacks them; the connection goes on. Before, the first Put or
// Get of it ended the process: UCX 1.13's shmat failed ("shmat(shmid=...) failed: Invalid
// argument", "failed to unpack remote key from remote md[0]: Shared memory error") and its
// cleanup of the half-unpacked key faulted (SIGSEGV in ucp_ep_rkey_unpack); the posix key
// set off "mm_posix.c:360 Assertion `length > 0' failed" (SIGABRT).
func TestForgedShmKeyRefused(t *testing.T) {
	p := newCopyPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src, dst, ds := p.blocks(t, 3, 4096)

	forged := ds[0]
	forged.region += 1 << 20 // a region the connection never learned: its key is unpacked
	forged.rkey = withSysvID(t, p.c, ds[0], goneSegment(t))
	if err := p.c.Put(ctx, src[0], forged); !errors.Is(err, ErrDescriptor) {
		t.Fatalf("put with the key of a segment not there: %v, want ErrDescriptor", err)
	}

	// A posix key of length 0, in place of the sysv one.
	p.c.w.mu.Lock()
	mds, _ := p.c.laneMDs()
	p.c.w.mu.Unlock()
	posix := -1
	for i, name := range mds {
		if name == "posix" {
			posix = i
		}
	}
	if posix < 0 {
		t.Fatalf("no posix lane: %q", mds)
	}
	key := make([]byte, rkeyFixed, 64)
	binary.NativeEndian.PutUint64(key, 1<<posix)
	key = append(key, posixKeyLen)
	seg := make([]byte, posixKeyLen)
	binary.NativeEndian.PutUint64(seg, posixProcFS|posixShmOpen|uint64(unix.Getpid()))
	key = append(key, seg...)
	forged.region++
	forged.rkey = string(key)
	if err := p.c.Get(ctx, src[0], forged); !errors.Is(err, ErrDescriptor) {
		t.Fatalf("get with a posix key of length 0: %v, want ErrDescriptor", err)
	}

	// An honest peer's region released before this process first used its descriptor.
	if err := p.pools[1].Free(dst[1]); err != nil {
		t.Fatal(err)
	}
	if err := p.pools[1].Free(dst[2]); err != nil {
		t.Fatal(err)
	}
	if err := p.pools[1].Free(dst[0]); err != nil {
		t.Fatal(err)
	}
	if err := p.pools[1].Close(); err != nil {
		t.Fatal(err)
	}
	p.pools[1] = nil
	if err := p.c.Put(ctx, src[1], ds[1]); !errors.Is(err, ErrDescriptor) {
		t.Fatalf("put to a region released before its first use: %v, want ErrDescriptor", err)
	}
	if err := p.c.Send(ctx, []byte("still open")); err != nil {
		t.Fatalf("the connection after the refusals: %v", err)
	}
}
