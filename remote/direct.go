package remote

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Puts and gets by copy: where a peer's region is a segment UCX allocated (SegmentSource)
// and the connection has UCX's shared-memory transports (Options.SharedMemory), unpacking
// the region's key attaches the segment to this process (SysV: shmat), and ucp_rkey_ptr
// says where. A put or get is then one copy by this process's CPU, out of the worker's lock
// but with the key kept alive until it ends (Transfer.copy), with no message and no request
// of UCX.
//
// UCX checks no range there: a forged key or descriptor would make the copy read or write wherever
// it points. So the kernel decides, once per region and connection, before any copy: the mappings
// of /proc/self/maps are read before and after the key is unpacked, and the region is reached by
// copy only if the unpack attached exactly one new SysV segment, shared, readable and writable,
// that starts where ucp_rkey_ptr puts the region's base and is at least as long as the region (the
// descriptor's range is checked against the region as for every transfer), and whose SysV record
// (shmctl IPC_STAT) says it was made by the peer's process (the one the connection watches,
// SharedMemory: the pid its hello claims, its own word, doc.go) for this process's user, is as
// long, and may be read and written by this process's group (mode 0060, group the effective
// gid), as UCX makes its SysV segments (0660, the creator's group). A SysV segment cannot
// shrink, and one attached stays mapped until this process detaches it (when the connection's
// keys are destroyed), whatever the peer does: a peer killed mid-copy leaves the copy to finish
// in memory nobody else sees. A region longer than its segment, a segment of this process's own
// sources, or of a process other than the peer, is a forged descriptor (ErrDescriptor); anything
// else that does not hold (ordinary memory, a posix segment, which a peer could truncate under
// the copy, another process attaching segments at the same moment, a segment the group may not
// attach) leaves the region to the connection's other path (messages, checked by the target).
//
// The group's access bounds what a peer that lies about its pid reaches: a peer able to connect
// over sm attaches this process's UCX segments (0660, this group; UCX 1.13 creates its posix
// files 0600, for this user alone), so it could attach by itself any segment the copies would
// then reach. A segment without the group's read and write (0600), or of another group, goes by
// message rather than being refused: a peer whose pid is true but whose user runs under another
// primary group, or that tightened its segments' mode, is honest, and its messages are as safe.

// direct returns the address in this process of d's buffer where the peer's region is
// reached by copy, 0 where it is not. Under mu.
func (c *Conn) direct(d *Descriptor) (uintptr, error) {
	e, err := c.region(d)
	if err != nil {
		return 0, err
	}
	if e.direct == 0 {
		e.direct = -1
		p, err := c.mapSegment(d, e)
		if err != nil {
			return 0, err
		}
		if p != 0 {
			e.direct, e.local = 1, p
			c.w.logf("remote: region %d of worker %016x is reached by copy at %#x", d.region, d.worker, p)
		}
	}
	if e.direct < 0 {
		return 0, nil
	}
	return e.local + uintptr(d.addr-e.base), nil
}

// mapSegment unpacks e's key and returns where the peer's region is mapped, after the
// checks above, or 0. Under mu.
func (c *Conn) mapSegment(d *Descriptor, e *rkeyEntry) (uintptr, error) {
	if e.rkey != 0 || d.memType != memHost || c.pid == 0 {
		return 0, nil // unpacked before (no telling what it attached), device memory, or a peer process not watched
	}
	before, err := readMappings()
	if err != nil {
		return 0, nil
	}
	rk, err := c.unpack(e)
	if err != nil {
		return 0, nil // UCX's puts and gets, and the target's check of a message, refuse it then
	}
	p, err := c.w.uw.RkeyPtr(rk, d.base)
	if err != nil || p == 0 {
		return 0, nil // no transport of the key maps the region here: ordinary memory
	}
	after, err := readMappings()
	if err != nil {
		return 0, nil
	}
	old := make(map[uintptr]bool, len(before))
	for _, m := range before {
		old[m.start] = true
	}
	var added []mapping
	for _, m := range after {
		if !old[m.start] && m.sysv() {
			added = append(added, m)
		}
	}
	if len(added) != 1 || added[0].start != p || !added[0].shared() {
		return 0, nil
	}
	m := added[0]
	var ds unix.SysvShmDesc
	if m.inode > 1<<31-1 {
		return 0, nil
	}
	if _, err := unix.SysvShmCtl(int(m.inode), unix.IPC_STAT, &ds); err != nil {
		return 0, nil
	}
	switch {
	case c.w.selfSysV[m.inode]:
		return 0, fmt.Errorf("%w: region %d of worker %016x names a segment of this process (SysV id %d)", ErrDescriptor, d.region, d.worker, m.inode)
	case d.size > uint64(m.end-m.start) || d.size > ds.Segsz:
		return 0, fmt.Errorf("%w: region %d of worker %016x is [%#x, +%d), its segment has %d bytes", ErrDescriptor, d.region, d.worker, d.base, d.size, min(uint64(m.end-m.start), ds.Segsz))
	case ds.Cpid != int32(c.pid) || ds.Perm.Uid != uint32(os.Geteuid()):
		return 0, fmt.Errorf("%w: region %d of worker %016x names a segment made by process %d of user %d, not by the peer (process %d) for this user", ErrDescriptor, d.region, d.worker, ds.Cpid, ds.Perm.Uid, c.pid)
	case ds.Perm.Mode&0o060 != 0o060 || ds.Perm.Gid != uint32(os.Getegid()):
		c.w.logf("remote: region %d of worker %016x goes by message: its segment (SysV id %d) has mode %#o, group %d, not this process's group's read and write", d.region, d.worker, m.inode, ds.Perm.Mode&0o777, ds.Perm.Gid)
		return 0, nil // one the peer's group could not attach itself: messages, checked by the peer
	}
	return p, nil
}

// copy does t's operations by copy (opCopied, checked whole by Start) with the worker's mutex
// let go, so that a batch of many blocks holds up neither the progress of other transfers nor
// other connections. What the copies use stays meanwhile: the local buffers are held in their
// pools, the regions of every operation of t count it as in flight (a Registration's Close
// refuses: the operations left to post after the copies name their region's registration),
// and the connection counts the copies (c.copying), so its keys, which keep the peer's segment
// attached here, are destroyed only after the last (reap, copied), and the worker's Close waits
// for them before it destroys anything. Called and returns under mu.
func (t *Transfer) copy() {
	w, c := t.c.w, t.c
	for i := range t.ops {
		t.lrs[i].inflight++
	}
	c.copying++
	w.copying++
	w.mu.Unlock()
	for i := range t.ops {
		if op := &t.ops[i]; op.Kind == opCopied {
			local, peer := mem.Bytes(uintptr(op.Local), uintptr(op.Length)), mem.Bytes(uintptr(op.Remote), uintptr(op.Length))
			if t.gets[i] {
				copy(local, peer)
			} else {
				copy(peer, local)
			}
			if w.copyHook != nil {
				w.copyHook(i)
			}
		}
	}
	w.mu.Lock()
	for i := range t.ops {
		t.lrs[i].inflight--
	}
	w.copying--
	if c.copying--; c.copying == 0 && c.reaped {
		w.destroyKeys(c) // reaped while the copies went
	}
	if w.copying == 0 {
		w.copied.Broadcast()
	}
}

// mapping is a line of /proc/self/maps.
type mapping struct {
	start, end uintptr
	perms      string
	inode      uint64
	path       string
}

// sysv reports whether the mapping is a SysV shared memory segment.
func (m mapping) sysv() bool { return len(m.path) >= 5 && m.path[:5] == "/SYSV" }

// shared reports whether the mapping is shared, readable and writable.
func (m mapping) shared() bool { return m.perms == "rw-s" }

// readMappings returns the mappings of this process, from the kernel.
func readMappings() ([]mapping, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	var ms []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m, ok := parseMapping(sc.Bytes()); ok {
			ms = append(ms, m)
		}
	}
	return ms, sc.Err()
}

// parseMapping parses a line of /proc/self/maps: "start-end perms offset dev inode path".
func parseMapping(line []byte) (mapping, bool) {
	f := bytes.Fields(line)
	if len(f) < 5 {
		return mapping{}, false
	}
	lo, hi, ok := bytes.Cut(f[0], []byte("-"))
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	inode, err3 := strconv.ParseUint(string(f[4]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || end <= start {
		return mapping{}, false
	}
	m := mapping{start: uintptr(start), end: uintptr(end), perms: string(f[1]), inode: inode}
	if len(f) > 5 {
		m.path = string(f[5])
	}
	return m, true
}

// findMapping returns the mapping of this process that holds addr.
func findMapping(addr uintptr) (mapping, bool) {
	ms, err := readMappings()
	if err != nil {
		return mapping{}, false
	}
	for _, m := range ms {
		if addr >= m.start && addr < m.end {
			return m, true
		}
	}
	return mapping{}, false
}
