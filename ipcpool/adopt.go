package ipcpool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Adoption: the memory outlives its owner. The pool's memory lives in memfds (or exported
// CUDA granules), which live while any process holds a descriptor or a mapping of them: every
// attached process keeps the pool's descriptors open, and so does a keeper (Keep). An owner
// started with Options.Adopt listens at the path and waits, that long at most, for one of
// them to hand it the descriptors (the processes of the owner that died rejoin it on their
// own, and the first to come is asked for them). It then maps the pool as it is, still
// locked by the keeper's mapping (MLOCK_ONFAULT here: no page faulted or pinned again),
// rebuilds its table from the control region, and takes the processes back by their slot
// and serial, their grants and handles as they were. A process that does not rejoin within
// Options.Timeout is taken to have left (its memory comes back once it has exited); one whose
// rejoin connected by then has that handshake's own deadline to end it. A process
// the previous owner had lost alive (leave.go) keeps its slot, its grants in limbo and what it
// retains until it has exited, as it did: its slot's line and grant words say so.
//
// Everything read from the descriptors and the control region is checked as at an attach:
// the geometry against this package's limits and the files' sizes and seals, each grant
// word's slot against the slots, each export entry's holder and place against the grants. A
// donor that hands over garbage is cut off, and the owner waits for another. What the grant
// words say of a process is held in doubt until it rejoins and claims its grants by its own
// record (claim.go).

// awaitDonor listens at the path and waits, d at most, for the pool's memory to be handed
// over. It reports whether it was.
func (w *Owner) awaitDonor(d time.Duration) (bool, error) {
	ln, lock, err := listen(w.path, w.fileMode)
	if err != nil {
		return false, err
	}
	end := time.Now().Add(d)
	w.mu.Lock()
	w.ln, w.lock, w.adopting, w.adoptEnd = ln, lock, true, end
	w.mu.Unlock()
	w.wg.Add(1)
	go w.serve()
	t := time.AfterFunc(d, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.adopting && time.Now().Before(end) {
		w.cond.Wait()
	}
	return !w.adopting, nil
}

// donated serves a rejoining process while the owner has no memory: it asks for the pool's
// descriptors and adopts them. It reports whether the owner has memory now (adopted by this
// call or another).
func (w *Owner) donated(c *net.UnixConn) (bool, error) {
	w.adoptMu.Lock()
	defer w.adoptMu.Unlock()
	if w.Process != nil {
		return true, nil
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed { // Serve failed to make a pool: nothing is adopted after it
		return false, fmt.Errorf("%w: the owner failed to serve", ErrClosed)
	}
	if err := writeMsg(c, msg{op: opReply, a: stDonate}, w.timeout); err != nil {
		return false, err
	}
	b := make([]byte, msgSize)
	n, fds, err := recvFds(c, b, 1+maxRegions)
	if err != nil {
		if errors.Is(err, ErrProtocol) { // descriptors or a message cut short
			w.refusedDonations.Add(1)
		}
		return false, err
	}
	if m, err := decodeMsg(b[:n]); err != nil || m.op != opDonate {
		closeFds(fds)
		w.refusedDonations.Add(1)
		return false, fmt.Errorf("%w: a donation that is not one", ErrProtocol)
	}
	if err := w.adopt(fds); err != nil {
		w.refusedDonations.Add(1)
		return false, err
	}
	return true, nil
}

// adopt maps the pool of the descriptors fds (the control region's first), rebuilds the
// owner from its control region and starts serving it. It takes fds.
func (w *Owner) adopt(fds []int) error {
	if len(fds) < 2 {
		closeFds(fds)
		return fmt.Errorf("%w: %d descriptors for a pool", ErrProtocol, len(fds))
	}
	l, vmm, ctlSize, err := readGeometry(fds[0])
	if err != nil {
		closeFds(fds)
		return err
	}
	if vmm && w.dev == nil {
		closeFds(fds)
		return fmt.Errorf("%w: adopting a VMM pool needs Options.Pool.Backend CUDAHost", ErrInvalidOptions)
	}
	sp, err := mapSpace(l, ctlSize, fds, spaceConfig{mode: lockOnFault, fallback: w.o.FallbackPageable, dev: w.dev, vmm: vmm})
	if err != nil {
		return err
	}
	c := sp.ctl()
	pool := c.load(hPool)
	if !c.matches(pool, l, boolWord(vmm)) {
		return abandon(sp, w.dev, fmt.Errorf("%w: the control region changed as it was adopted", ErrProtocol))
	}
	old := c.slotLoad(0, sSerial)
	h := hello{pool: pool, slot: 0, serial: nextOwnerSerial(&c, old), layout: l, ctlSize: ctlSize,
		vmm: vmm, epoch: c.load(hOwnerEpoch) + 1}
	p, err := newProcess(h, sp, ownerGranter{w, w.timeout}, processConfig{pool: w.po, drain: w.o.DrainInterval, dev: w.dev})
	if err != nil {
		// Nothing of the donor's pool is installed yet: the pool made if no other donor
		// comes has the Options' geometry.
		return abandon(sp, w.dev, err)
	}
	lines := readSlots(&c)
	w.mu.Lock()
	// The donor's geometry, once the adoption can no longer fail.
	w.table, w.procs, w.hello = make([]grantState, l.grants()), make([]slotState, l.slots), h
	w.Process, p.owner = p, w
	w.rebuild(old, h.serial, lines)
	c.store(hOwnerPid, uint64(os.Getpid()))
	c.store(hOwnerEpoch, w.hello.epoch)
	w.servedAt = time.Now()
	w.rejoinBy = w.servedAt.Add(w.timeout)
	w.adopting = false
	w.moveDeadlines()
	w.cond.Broadcast()
	w.mu.Unlock()
	w.run(p)
	return nil
}

// readGeometry reads and checks the geometry of the control region of fd, once it knows fd is a
// sealed memfd (a read of another file could hang).
func readGeometry(fd int) (l layout, vmm bool, size uintptr, err error) {
	if err := checkSealed(fd); err != nil {
		return l, false, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return l, false, 0, fmt.Errorf("%w: fstat of the control region: %w", ErrProtocol, err)
	}
	if st.Size < 8*hdrWords || st.Size > 1<<40 {
		return l, false, 0, fmt.Errorf("%w: a control region of %d bytes", ErrProtocol, st.Size)
	}
	b := make([]byte, 8*hdrWords)
	if n, err := unix.Pread(fd, b, 0); err != nil || n != len(b) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return l, false, 0, fmt.Errorf("%w: reading the control region (%d of %d bytes): %w", ErrProtocol, max(n, 0), len(b), err)
	}
	w := make([]uint64, hdrWords)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	for i := hRegions; i <= hBackend; i++ {
		if w[i] > maxPoolSize {
			return l, false, 0, fmt.Errorf("%w: header word %d is %#x", ErrProtocol, i, w[i])
		}
	}
	l = layout{regions: int(w[hRegions]), regionSize: uintptr(w[hRegionSize]), grantSize: uintptr(w[hGrantSize]),
		slots: int(w[hSlots]), ringCap: int(w[hRingCap]), exports: int(w[hExports])}
	if w[hMagic] != ctlMagic || w[hVersion] != ctlVersion || w[hBackend] > 1 {
		return l, false, 0, fmt.Errorf("%w: not a control region of this version", ErrProtocol)
	}
	if err := l.check(); err != nil {
		return l, false, 0, fmt.Errorf("%w: a control region with %v", ErrProtocol, err)
	}
	if uintptr(st.Size) != l.ctlBytes() {
		return l, false, 0, fmt.Errorf("%w: a control region of %d bytes for a geometry of %d", ErrProtocol, st.Size, l.ctlBytes())
	}
	return l, w[hBackend] == 1, l.ctlBytes(), nil
}

// slotLine is what an adopting owner reads of a slot's line: the serial and, for a slot kept
// for a process gone alive (serialGone), a watch of that process and whether it may hold
// retain bits.
type slotLine struct {
	serial  uint64
	kept    bool
	watch   watch
	retains bool
}

// readSlots reads the slots' lines of c for rebuild, once each (they are any process's to
// write), and opens the watches they need (system calls: before w.mu is taken).
func readSlots(c *ctl) []slotLine {
	lines := make([]slotLine, c.nslots)
	for s := 1; s < c.nslots; s++ {
		v := c.slotLoad(s, sSerial)
		serial := v &^ serialGone
		if v&serialGone == 0 || serial == 0 || serial >= maxPoolSize {
			lines[s].serial = v // (garbage: rebuild and takeSlot give the slot up)
			continue
		}
		lines[s] = slotLine{serial: serial, kept: true, watch: watchSlot(c, s),
			retains: c.slotLoad(s, sFlags)&flagRetains != 0}
	}
	return lines
}

// nextOwnerSerial returns the serial of an owner that adopts the pool of c, whose slot 0 says
// the previous owner had serial old: old+1, as a slot's next process has. The word is any
// process's to write, and the serial must be one a hello carries, not 0 (a free slot's: no
// fence would wait for the owner's device), nor 2^48 or more (a holder word keeps 48 bits),
// and the holder of none of slot 0's live entries (the previous owners' buffers would pass
// for this owner's): past what old and those holders say, when they are in range.
func nextOwnerSerial(c *ctl, old uint64) uint64 {
	const top = maxPoolSize - 1 // the next serial is at most maxPoolSize, what a hello carries
	last := uint64(0)
	if old < top {
		last = old
	}
	for e := range c.nexp { // slot 0's part of the export table
		if c.load(c.entry(e)+eState)&eLive == 0 {
			continue
		}
		if h := c.load(c.entry(e) + eHolder); h&0xffff == 0 && h>>16 > last && h>>16 < top {
			last = h >> 16
		}
	}
	return last + 1
}

// rebuild makes the owner's table and slots from the control region of a pool it adopts,
// whose previous owner had serial old (its slot's word: it may be garbage), and takes slot 0
// with serial serial (nextOwnerSerial); lines are the slots' (readSlots). It
// reads only the slots and the grant words, so that the owner serves at once; what needs a
// scan of the export table (the previous owner's retains and buffers, and those of processes
// gone before it) is done on the watcher's first round (finishAdoption). Until then every
// grant no process holds is kept back (limbo, for the scan), and the owner's own Retain waits.
// A slot kept for a process gone alive is kept still, and every grant word naming it is in
// that process's limbo (in limbo or orphaned by the words, or held: the previous owner may have
// died as the process left); the scan pins its buffers others still retain (adoptOrphans).
// Called with w.mu held.
func (w *Owner) rebuild(old, serial uint64, lines []slotLine) {
	c := &w.c
	for s := 1; s < len(w.procs); s++ {
		switch l := lines[s]; {
		case l.kept:
			g := newGone(s, l.serial, l.watch, l.watch.none())
			// fromWords: the slot's line is all that says it (claim.go).
			g.retains, g.fromWords = l.retains, true
			w.goneList = append(w.goneList, g)
			w.procs[s] = slotState{keeper: g, serial: l.serial}
		case l.serial != 0:
			w.procs[s] = slotState{used: true, serial: l.serial, rejoin: true}
		}
	}
	scan := newGone(0, old, watch{pidfd: -1}, false)
	for g := range w.table {
		gen, state, slot := unpackGrant(c.load(c.grantWord(g)))
		t := &w.table[g]
		named := slot > 0 && slot < len(w.procs)
		switch {
		case named && w.procs[slot].keeper != nil && (state == 0 || state == gLimbo || state == gOrphan):
			*t = grantState{state: gLimbo, gone: w.procs[slot].keeper, gen: gen + 1}
		case named && w.procs[slot].used && state == 0:
			*t = grantState{state: gHeld, slot: slot, serial: w.procs[slot].serial, gen: gen + 1}
		default:
			*t = grantState{state: gLimbo, gone: scan, gen: gen + 1}
			// A word naming no process: forged, the word or the slot's line (claim.go).
			w.suspect = w.suspect || slot > 0
		}
		w.publish(g)
	}
	w.scan = scan
	w.procs[0] = slotState{used: true, active: true, serial: serial}
	c.slotStore(0, sSerial, serial)
	c.slotStore(0, sPid, uint64(os.Getpid()))
	c.slotStore(0, sStart, startTime(os.Getpid()))
	w.epoch = c.load(hFence)
}

// finishAdoption lets go what the previous owner held (it died): its retains, its buffers
// nobody else retains; the buffers others still retain, of it and of processes gone before
// it, keep their grants (orphans); every other grant no process holds comes back once every
// process with a device has passed a fence, and once no process is still to rejoin, which
// may claim it (claim.go).
func (w *Owner) finishAdoption() {
	w.mu.Lock()
	g0 := w.scan
	w.scan = nil
	// The previous owner has exited (it let the path's lock go): its entries are the owner's to
	// let go (dropEntries).
	g0.fromWords, g0.exited = true, true
	pending := w.rejoinsPending()
	retired, stuck := w.dropRetains(0, nil)
	if len(stuck) > 0 {
		// Bits of the previous owner's that stayed (a peer rewrote their words) are slot 0's,
		// this owner's: its drainer takes them back (clearUntaken), as a Retain's too late.
		w.Process.ex.mu.Lock()
		w.Process.ex.untaken = append(w.Process.ex.untaken, stuck...)
		w.Process.ex.mu.Unlock()
	}
	w.dropEntries(g0)
	for s := range w.procs {
		w.adoptOrphans(s, g0)
	}
	var free []int
	for g := range w.table {
		t := &w.table[g]
		switch {
		case t.gone != g0:
		case g0.pins[g] > 0:
			*t = grantState{state: gOrphan, gone: g0, gen: t.gen + 1}
			w.publish(g)
		case pending: // a process still to rejoin may claim it (its word forged)
			w.unclaim(g)
		default:
			*t = grantState{state: gFree, gen: t.gen + 1}
			free = append(free, g)
		}
	}
	g0.exited = true
	if len(g0.entries) > 0 {
		w.goneList = append(w.goneList, g0)
	}
	w.fence(free)
	close(w.scanned)
	w.mu.Unlock()
	for _, r := range retired {
		w.Process.deliver(r.e, r.gen)
	}
}

// unheld reports whether every grant of sp is one no process holds: kept for the scan, an
// orphan, or (keeper not nil) in the limbo of keeper, the process gone alive whose buffer sp
// is. Called with w.mu held.
func (w *Owner) unheld(sp span, scan, keeper *gone) bool {
	for gr := sp.first; gr <= sp.last; gr++ {
		if t := &w.table[gr]; t.gone != scan && t.state != gOrphan && (keeper == nil || t.gone != keeper) {
			return false
		}
	}
	return true
}

// adoptOrphans finds the live entries of slot s's part of the table whose holder is no
// process the owner serves: of the process gone alive the slot is kept for, or of one gone
// before the previous owner died. Those others retain keep their grants (orphaned, until
// released, and then on in the limbo of a process alive), the rest are let go. An entry of
// the process the slot is kept for that its previous owner did not let go (eGone) is the
// process's: one it shared after it left, or freed itself, which it may free or take in while
// it lives; the owner lets it go when the process exits, as any owner would (tickLocked).
// Called with w.mu held.
func (w *Owner) adoptOrphans(s int, scan *gone) {
	c := &w.c
	keeper := w.procs[s].keeper
	var g *gone
	for i := range w.exports {
		e := s*w.exports + i
		w0 := c.load(c.entry(e) + eState)
		holder := c.load(c.entry(e) + eHolder)
		if w0&eLive == 0 || int(holder&0xffff) == s && w.procs[s].used && holder>>16 == w.procs[s].serial {
			continue
		}
		if _, pinned := scan.entries[e]; pinned {
			continue // the previous owner's, retained: dropEntries kept it
		}
		owner, mine := g, (*gone)(nil)
		if keeper != nil && int(holder&0xffff) == s && holder>>16 == keeper.serial {
			if _, pinned := keeper.entries[e]; pinned || w0&eGone == 0 {
				// Pinned by its leave already (a rejoin given up before the scan), or the
				// process's own.
				continue
			}
			owner, mine = keeper, keeper
		}
		sp, ok := w.entrySpan(e)
		free := mine.freeFlags()
		if ok && w.unheld(sp, scan, mine) {
			if owner = w.letGoOrPin(e, w0, free, sp, owner); owner != nil && owner != mine {
				g = owner
			}
			continue
		}
		w.letGoOrPin(e, w0, free, span{-1, -1}, nil) // (its place is garbage: nothing to pin)
	}
}

// letGoOrPin lets go entry e of a holder no process the owner serves, live at w0 when it was
// read (free: the free entry's flags, letGo), or pins it with the grants of sp (a span of -1:
// none) while others retain it: for owner, or a new record of a process gone (it returns the
// one that pins it). Called with w.mu held.
func (w *Owner) letGoOrPin(e int, w0, free uint64, sp span, owner *gone) *gone {
	c := &w.c
	st := c.entry(e) + eState
	gen := entryGen(w0)
	for range casTries { // (an entry a peer rewrites without end is left as it is)
		if c.letGo(e, w0, free) {
			return owner
		}
		if c.retained(e) {
			// (Marked retiring, too: by a release that a retain landing may yet back off.)
			if sp.first < 0 {
				// Retained, but not in grants of the holder's (its place is garbage): let go
				// all the same.
				if now := c.load(st); entryGen(now) == gen && now&eLive != 0 {
					c.cas(st, now, packState(gen+1, free))
				}
				return owner
			}
			if owner == nil {
				s := e / w.exports
				owner = newGone(s, c.load(c.entry(e)+eHolder)>>16, watch{pidfd: -1}, true)
				owner.fromWords = true
				w.goneList = append(w.goneList, owner)
			}
			for gr := sp.first; gr <= sp.last; gr++ {
				if t := &w.table[gr]; t.gone != owner || t.state != gOrphan {
					*t = grantState{state: gOrphan, gone: owner, gen: t.gen + 1}
					w.publish(gr)
				}
			}
			owner.pin(e, sp, gen)
			return owner
		}
		if w0 = c.load(st); entryGen(w0) != gen || w0&eLive == 0 {
			return owner // let go meanwhile
		}
	}
	return owner
}
