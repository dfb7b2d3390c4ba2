package ipcpool

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The owner dies (SIGKILL) and a new one adopts the pool: the same pool (its id), its
// processes rejoined in their slots, a handle made before the restart still valid, a buffer
// of the dead owner that a survivor retains still intact (and one nobody retained stale),
// and the survivor allocating from the new owner.
func TestOwnerRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	k, err := Keep(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Keep", err)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	pb, err := p.Alloc(5000)
	must(t, "Alloc", err)
	fill(pb, 3)
	ph, err := p.Handle(pb)
	must(t, "Handle", err)
	kept, gone := a.alloc(t, 3000, 7), a.alloc(t, 3000, 8)
	must(t, "Retain", p.Retain(kept))
	if got := a.do(t, "C %s 3", fmtHandle(ph)); got != "OK" {
		t.Fatalf("the first owner reads the survivor's buffer: %s", got)
	}
	must(t, "kill", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true

	b := startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	if b.pool != a.pool {
		t.Fatalf("the new owner serves pool %x, the dead one served %x: it did not adopt", b.pool, a.pool)
	}
	waitFor(t, func() bool { return p.Rejoined() == 1 && k.Rejoined() == 1 })
	if got := b.do(t, "C %s 3", fmtHandle(ph)); got != "OK" {
		t.Fatalf("the new owner reads, by a handle made before the restart: %s", got)
	}
	if got := b.do(t, "C %s 7", fmtHandle(kept)); got != "OK" {
		t.Fatalf("the dead owner's buffer the survivor retains: %s", got)
	}
	// The dead owner's buffer nobody retained is let go by the new owner's first round.
	waitFor(t, func() bool { return b.do(t, "C %s 8", fmtHandle(gone)) == "E stale" })
	kb, err := p.Bytes(kept)
	must(t, "Bytes", err)
	must(t, "verify", verify(kb, 7))
	x, err := p.Alloc(3 << 20) // more than the survivor holds: a grant of the new owner
	must(t, "Alloc after the restart", err)
	must(t, "Free", p.Free(x))
	must(t, "Release", p.Release(kept))
	if _, err := p.Bytes(kept); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("the dead owner's buffer after its last release: %v", err)
	}
	must(t, "Free", p.Free(pb))
	if got := b.do(t, "C %s 3", fmtHandle(ph)); got != "E stale" {
		t.Fatalf("the survivor's buffer after its free: %s", got)
	}
	must(t, "Close", p.Close())
	must(t, "keeper Close", k.Close())
}

// Without a keeper: a surviving process hands the new owner the pool. A process that died
// while no owner ran does not rejoin; its memory comes back once the new owner gives up
// waiting for it (Options.Timeout), and its buffers others retain live on.
func TestOwnerRestartWithoutKeeper(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	s1 := startChild(t, path, childQuietEnv+"=1")
	s2 := startChild(t, path, childQuietEnv+"=1")
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	h1 := s1.alloc(t, 2000, 1)
	h2, h2kept := s2.alloc(t, 2000, 2), s2.alloc(t, 2000, 3)
	must(t, "Retain", p.Retain(h2kept))
	if got := s2.do(t, "N"); got == "G 0" {
		t.Fatal("s2 holds no grant")
	}
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	s2.kill() // dies while no owner runs
	b := startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	if b.pool != a.pool {
		t.Fatalf("pool %x after the restart, %x before", b.pool, a.pool)
	}
	waitFor(t, func() bool { return p.Rejoined() == 1 })
	if got := b.do(t, "C %s 1", fmtHandle(h1)); got != "OK" {
		t.Fatalf("a survivor's buffer after the restart: %s", got)
	}
	if got := s1.do(t, "C %s 1", fmtHandle(h1)); got != "OK" {
		t.Fatalf("the survivor reads its own buffer by handle: %s", got)
	}
	// s2 did not rejoin: given up after the new owner's Timeout (300 ms here).
	waitFor(t, func() bool {
		_, err := p.Bytes(h2)
		return errors.Is(err, ErrStaleHandle)
	})
	kb, err := p.Bytes(h2kept)
	must(t, "Bytes of the dead process's buffer p retains", err)
	must(t, "verify", verify(kb, 3))
	must(t, "Release", p.Release(h2kept))
	waitFor(t, func() bool {
		ps := p.SharedStats().Pool
		return ps.Orphaned == 0 && ps.Limbo == 0 && ps.Fenced == 0
	})
	if got := s1.do(t, "F %s", fmtHandle(h1)); got != "OK" {
		t.Fatal(got)
	}
	s1.quit(t)
	must(t, "Close", p.Close())
}

// A donation that is not a pool (a control region of garbage, descriptors missing) is refused:
// the owner waiting for the memory is not hurt, and takes the next donor.
func TestAdoptRefusesGarbage(t *testing.T) {
	o := Options{Size: 8 << 20}
	l, err := o.layout()
	must(t, "layout", err)
	for _, fds := range [][]int{
		nil,
		memfdsNoClose(t, 4096, 2<<20),
		memfdsNoClose(t, l.ctlBytes(), 2<<20), // a header of zeros
	} {
		w := newOwner(filepath.Join(t.TempDir(), "x.sock"), o, l)
		if err := w.adopt(fds); !errors.Is(err, ErrProtocol) {
			t.Fatalf("adopting %d descriptors of garbage: %v", len(fds), err)
		}
	}
}

// memfdsNoClose makes memfds to hand over (their receiver closes them).
func memfdsNoClose(t *testing.T, sizes ...uintptr) []int {
	var fds []int
	for _, n := range sizes {
		fd, err := newMemfd("test", n)
		must(t, "memfd", err)
		fds = append(fds, fd)
	}
	return fds
}

// validHeader returns the header of a control region of a small pool, and the region's size.
func validHeader() (hdr []byte, size int64) {
	l := layout{regions: 1, regionSize: 2 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	c := testCtl(l, nil)
	c.writeHeader(7, 0)
	hdr = make([]byte, 8*hdrWords)
	for i := range hdrWords {
		binary.LittleEndian.PutUint64(hdr[8*i:], c.load(i))
	}
	return hdr, int64(l.ctlBytes())
}

func FuzzReadGeometry(f *testing.F) {
	hdr, size := validHeader()
	f.Add(hdr, size)
	f.Fuzz(func(t *testing.T, hdr []byte, size int64) {
		if size < 0 || size > 1<<24 {
			return
		}
		fd := sealedFile(t, hdr, size)
		gl, _, n, err := readGeometry(fd)
		if err == nil && (gl.check() != nil || n != gl.ctlBytes() || int64(n) != size) {
			t.Fatalf("accepted %+v of %d bytes", gl, n)
		}
	})
}

// sealedFile returns a memfd of size bytes that begins with hdr, sealed as a pool's are.
func sealedFile(t testing.TB, hdr []byte, size int64) int {
	fd, err := unix.MemfdCreate("pool", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	_ = unix.Ftruncate(fd, size)
	_, _ = unix.Pwrite(fd, hdr, 0)
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	return fd
}

// A control region's geometry is read only from a sealed memfd: a peer's descriptor of any
// other file is refused before a byte of it is read (a read of a FUSE file, or of one on a
// stalled mount, could hang the adopting owner for good). Here the files hold a valid header,
// which readGeometry accepted from any file before.
func TestReadGeometryOnlyFromSealedMemfd(t *testing.T) {
	hdr, size := validHeader()
	if _, _, _, err := readGeometry(sealedFile(t, hdr, size)); err != nil {
		t.Fatalf("a sealed memfd with a valid header: %v", err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "ctl"))
	must(t, "create", err)
	defer f.Close()
	must(t, "truncate", f.Truncate(size))
	_, err = f.WriteAt(hdr, 0)
	must(t, "write", err)
	unsealed, err := unix.MemfdCreate("pool", unix.MFD_CLOEXEC)
	must(t, "memfd", err)
	defer unix.Close(unsealed)
	must(t, "truncate", unix.Ftruncate(unsealed, size))
	_, err = unix.Pwrite(unsealed, hdr, 0)
	must(t, "write", err)
	for name, fd := range map[string]int{"a regular file": int(f.Fd()), "an unsealed memfd": unsealed} {
		if _, _, _, err := readGeometry(fd); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s with a valid header: %v, want ErrProtocol", name, err)
		}
	}
}

// A keeper alone hands the pool over: no process of the dead owner survives, and the new
// owner (this process) adopts the pool the keeper kept locked, then serves it.
func TestKeeperHandsOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 8<<20)
	k := startKeeperChild(t, path)
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	w, err := Serve(path, Options{Size: 4 << 20, Adopt: 5 * time.Second, FallbackPageable: true})
	must(t, "Serve adopting", err)
	if w.hello.pool != a.pool || w.poolBytes() != 8<<20 {
		t.Fatalf("the new owner serves pool %x of %d bytes; the keeper kept %x of 8 MiB", w.hello.pool, w.poolBytes(), a.pool)
	}
	waitFor(t, func() bool { return k.do(t, "R") == "R 1" }) // the keeper rejoined
	p := attachTest(t, path, AttachOptions{})
	b, err := p.Alloc(6 << 20) // most of the pool: the dead owner's grant came back
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b))
	must(t, "Close", p.Close())
	k.kill()
	waitFor(t, func() bool { return w.Attached() == 0 })
	must(t, "owner Close", w.Close())
}
