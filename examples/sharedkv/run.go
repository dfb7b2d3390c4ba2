package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/ipcpool"
)

// entry is the index's record of a key: its version, its handle and who wrote it.
type entry struct {
	version int
	h       ipcpool.Handle
	writer  int
}

// store is the coordinator: the index, and the processes.
type store struct {
	out       io.Writer
	path      string
	owner     *proc
	keeper    *proc
	workers   []*proc
	alive     []int
	index     map[int]entry
	r         *rand.Rand
	valueSize int
	writes    int
	reads     int
	stale     int
}

func run(out io.Writer, valueSize, ops, keys int, seed uint64) error {
	dir, err := os.MkdirTemp("", "sharedkv")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s := &store{out: out, path: filepath.Join(dir, "kv.sock"), index: map[int]entry{}, r: rand.New(rand.NewPCG(seed, 0)), valueSize: valueSize}
	defer s.stopAll()
	if err := s.startAll(); err != nil {
		return err
	}
	if err := s.ops(ops/2, keys); err != nil {
		return err
	}
	prefix, err := s.sharePrefix()
	if err != nil {
		return err
	}
	if err := s.killWorker(3, prefix); err != nil {
		return err
	}
	if err := s.restartOwner(); err != nil {
		return err
	}
	if err := s.ops(ops/2, keys); err != nil {
		return err
	}
	if err := s.memoryFlowsBack(); err != nil {
		return err
	}
	if err := s.staleRefused(); err != nil {
		return err
	}
	for _, w := range []int{0, 1, 2} { // the prefix's last references go
		if _, err := s.workers[w].do("U %s", hstr(prefix.h)); err != nil {
			return err
		}
	}
	return s.finish()
}

func (s *store) startAll() error {
	var err error
	if s.owner, err = start("owner", ownerEnv+"="+s.path); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "owner: pid %d serves pool %s: 8 MiB, lent to workers in grants of 2 MiB, "+
		"socket %s\n", s.owner.cmd.Process.Pid, s.owner.ready[1], s.path)
	if s.keeper, err = start("keeper", keeperEnv+"="+s.path); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "keeper: pid %d holds the pool locked\n", s.keeper.cmd.Process.Pid)
	for i := range 4 {
		w, err := start(fmt.Sprintf("worker %d", i), workerEnv+"="+s.path)
		if err != nil {
			return err
		}
		s.workers = append(s.workers, w)
		s.alive = append(s.alive, i)
		fmt.Fprintf(s.out, "worker %d: pid %s attached in slot %s\n", i, w.ready[2], w.ready[1])
	}
	return nil
}

// write has worker w write a new version of key k.
func (s *store) write(w, k, n int) (entry, error) {
	e := s.index[k]
	line, err := s.workers[w].do("W %d %d %d", k, e.version+1, n)
	if err != nil {
		return entry{}, err
	}
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "H" {
		return entry{}, fmt.Errorf("worker %d write: %s", w, line)
	}
	h, err := parseHandle(f[1:])
	if err != nil {
		return entry{}, err
	}
	s.writes++
	return entry{version: e.version + 1, h: h, writer: w}, nil
}

// ops runs n random operations: new versions of keys (the old one let go by a random
// worker) and reads by handle.
func (s *store) ops(n, keys int) error {
	for range n {
		k := s.r.IntN(keys)
		w := s.alive[s.r.IntN(len(s.alive))]
		old, ok := s.index[k]
		if !ok || s.r.IntN(3) == 0 {
			e, err := s.write(w, k, s.valueSize)
			if err != nil {
				return err
			}
			if ok { // the old version goes back to whoever holds it
				got, err := s.workers[s.alive[s.r.IntN(len(s.alive))]].do("F %s", hstr(old.h))
				if err != nil || got != "OK" && got != "STALE" {
					return fmt.Errorf("letting go key %d version %d: %s %v", k, old.version, got, err)
				}
			}
			s.index[k] = e
			continue
		}
		got, err := s.workers[w].do("R %d %d %s", k, old.version, hstr(old.h))
		if err != nil {
			return err
		}
		switch got {
		case "OK":
			s.reads++
		case "STALE": // written by a worker that died: gone with it
			delete(s.index, k)
			s.stale++
		default:
			return fmt.Errorf("worker %d read of key %d: %s", w, k, got)
		}
	}
	return nil
}

// prefixKey is the shared prefix's key, apart from the store's keys.
const prefixKey = 1 << 20

// sharePrefix has worker 3 write the prefix and workers 0, 1 and 2 retain it.
func (s *store) sharePrefix() (entry, error) {
	e, err := s.write(3, prefixKey, s.valueSize)
	if err != nil {
		return e, err
	}
	for _, w := range []int{0, 1, 2} {
		if got, err := s.workers[w].do("T %s", hstr(e.h)); err != nil || got != "OK" {
			return e, fmt.Errorf("worker %d retains the prefix: %s %v", w, got, err)
		}
	}
	fmt.Fprintln(s.out, "prefix: a value written by worker 3 and retained (kept alive) by "+
		"workers 0, 1 and 2")
	return e, nil
}

// killWorker kills worker k (SIGKILL): its values are refused from then on, the prefix the
// others retain still reads.
func (s *store) killWorker(k int, prefix entry) error {
	held := 0
	for _, e := range s.index {
		if e.writer == k {
			held++
		}
	}
	s.workers[k].kill()
	s.alive = []int{0, 1, 2}
	lost := 0
	for key, e := range s.index {
		if e.writer != k {
			continue
		}
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			got, err := s.workers[0].do("R %d %d %s", key, e.version, hstr(e.h))
			if err != nil {
				return err
			}
			if got == "STALE" {
				break
			}
			if got != "OK" || time.Now().After(end) {
				return fmt.Errorf("a value of the killed worker: %s", got)
			}
		}
		delete(s.index, key)
		lost++
	}
	got, err := s.workers[1].do("R %d %d %s", prefixKey, prefix.version, hstr(prefix.h))
	if err != nil || got != "OK" {
		return fmt.Errorf("the prefix after its writer died: %s %v", got, err)
	}
	fmt.Fprintf(s.out, "worker 3: killed (SIGKILL) holding %d values: %d now refused as gone, "+
		"never read as other bytes; the prefix it wrote still reads (the others retain it)\n", held, lost)
	return nil
}

// restartOwner kills the owner (SIGKILL) and starts a new one, which adopts the pool.
func (s *store) restartOwner() error {
	id := s.owner.ready[1]
	s.owner.kill()
	var err error
	if s.owner, err = start("new owner", ownerEnv+"="+s.path, adoptEnv+"=1"); err != nil {
		return err
	}
	if s.owner.ready[1] != id {
		return fmt.Errorf("the new owner serves pool %s, not %s", s.owner.ready[1], id)
	}
	for _, w := range s.alive {
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			got, err := s.workers[w].do("G")
			if err != nil {
				return err
			}
			if strings.HasSuffix(got, " 1") {
				break
			}
			if time.Now().After(end) {
				return fmt.Errorf("worker %d did not rejoin: %s", w, got)
			}
		}
	}
	for k, e := range s.index { // every handle made before the restart still reads
		got, err := s.workers[s.alive[0]].do("R %d %d %s", k, e.version, hstr(e.h))
		if err != nil || got != "OK" {
			return fmt.Errorf("key %d after the restart: %s %v", k, got, err)
		}
	}
	fmt.Fprintf(s.out, "owner: killed (SIGKILL); a new owner adopted pool %s in %s µs, the workers rejoined, all %d values read back intact\n",
		id, s.owner.ready[2], len(s.index))
	return nil
}

// grants returns the pool memory worker w holds.
func (s *store) grants(w int) (int, error) {
	got, err := s.workers[w].do("G")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(got)
	if len(f) != 3 {
		return 0, fmt.Errorf("worker %d: %s", w, got)
	}
	return strconv.Atoi(f[1])
}

// memoryFlowsBack has worker 0 let go every value it wrote, shows its memory going back to
// the pool, and worker 1 taking it for a batch too big for its own.
func (s *store) memoryFlowsBack() error {
	before, err := s.grants(0)
	if err != nil {
		return err
	}
	n := 0
	for k, e := range s.index {
		if e.writer == 0 {
			if got, err := s.workers[1].do("F %s", hstr(e.h)); err != nil || got != "OK" {
				return fmt.Errorf("letting go key %d: %s %v", k, got, err)
			}
			delete(s.index, k)
			n++
		}
	}
	start := time.Now()
	for end := start.Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		g, err := s.grants(0)
		if err != nil {
			return err
		}
		if g == 0 {
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("worker 0 still holds %d bytes of the pool", g)
		}
	}
	took := time.Since(start)
	b1, _ := s.grants(1)
	var batch []entry
	for i := range 3 << 20 / s.valueSize { // 3 MiB: more than one grant
		e, err := s.write(1, 2<<20+i, s.valueSize)
		if err != nil {
			return err
		}
		batch = append(batch, e)
	}
	a1, _ := s.grants(1)
	fmt.Fprintf(s.out, "memory: worker 0 let go its %d values; its %d KiB of the pool went back in %v; worker 1 then wrote 3 MiB and holds %d KiB (from %d)\n",
		n, before>>10, took.Round(time.Millisecond), a1>>10, b1>>10)
	for _, e := range batch {
		if got, err := s.workers[2].do("F %s", hstr(e.h)); err != nil || got != "OK" {
			return fmt.Errorf("letting go the batch: %s %v", got, err)
		}
	}
	return nil
}

// staleRefused writes a new version of a key and reads the old version's handle: refused.
// Where no value is left (few -ops, the ones there were written by the killed worker or let go
// by worker 0), it writes one first.
func (s *store) staleRefused() error {
	if len(s.index) == 0 {
		e, err := s.write(s.alive[0], 0, s.valueSize)
		if err != nil {
			return err
		}
		s.index[0] = e
	}
	for k, old := range s.index {
		e, err := s.write(s.alive[1], k, s.valueSize)
		if err != nil {
			return err
		}
		if got, err := s.workers[0].do("F %s", hstr(old.h)); err != nil || got != "OK" {
			return fmt.Errorf("letting go the old version: %s %v", got, err)
		}
		s.index[k] = e
		got, err := s.workers[2].do("R %d %d %s", k, old.version, hstr(old.h))
		if err != nil || got != "STALE" {
			return fmt.Errorf("the old version's handle: %s %v, want it refused", got, err)
		}
		got, err = s.workers[2].do("F %s", hstr(old.h)) // a replayed free
		if err != nil || got != "STALE" {
			return fmt.Errorf("a replayed free of the old version: %s %v, want it refused", got, err)
		}
		fmt.Fprintf(s.out, "stale: key %d rewritten: its old version's handle is refused, to read or "+
			"to free a second time, never read as the new value\n", k)
		return nil
	}
	return errors.New("no value left to replace")
}

// finish lets every value go, stops the workers, and shows the pool empty.
func (s *store) finish() error {
	for k, e := range s.index {
		got, err := s.workers[s.alive[0]].do("R %d %d %s", k, e.version, hstr(e.h))
		if err != nil || got != "OK" {
			return fmt.Errorf("key %d at the end: %s %v", k, got, err)
		}
		if got, err := s.workers[s.alive[1]].do("F %s", hstr(e.h)); err != nil || got != "OK" {
			return fmt.Errorf("letting go key %d: %s %v", k, got, err)
		}
	}
	gone := ""
	if s.stale > 0 { // the kill took every value of the killed worker out of the index
		gone = fmt.Sprintf(", %d values found gone with the killed worker", s.stale)
	}
	fmt.Fprintf(s.out, "done: %d writes, %d reads by handle%s; %d values intact at the end\n",
		s.writes, s.reads, gone, len(s.index))
	for _, w := range s.alive {
		if got, err := s.workers[w].do("Q"); err != nil || got != "OK" {
			return fmt.Errorf("worker %d leaving: %s %v", w, got, err)
		}
		if err := s.workers[w].quit(); err != nil { // its exit status: 1 when its Close failed
			return fmt.Errorf("worker %d: %w", w, err)
		}
	}
	if err := s.keeper.quit(); err != nil {
		return err
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got, err := s.owner.do("P")
		if err != nil {
			return err
		}
		var procs, held, free, orphaned int
		if _, err := fmt.Sscanf(got, "P %d %d %d %d", &procs, &held, &free, &orphaned); err != nil {
			return fmt.Errorf("owner: %s", got)
		}
		if procs == 1 && held == 0 && orphaned == 0 && free == 4 {
			fmt.Fprintln(s.out, "pool: every process but the owner gone, all 4 grants free")
			return s.owner.quit()
		}
		if time.Now().After(end) {
			return fmt.Errorf("the pool at the end: %s (processes, held, free, orphaned)", got)
		}
	}
}

func (s *store) stopAll() {
	for _, p := range append([]*proc{s.owner, s.keeper}, s.workers...) {
		if p != nil {
			p.kill()
		}
	}
}
