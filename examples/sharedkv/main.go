// Sharedkv is a pinned key-value store shared by three processes: this one owns a pool of
// locked memory (package shared) and the store's index; two worker processes (this program
// again, with SHAREDKV_WORKER set) attach to the pool, write values into blocks of their own
// and read each other's blocks by handle. Half-way one worker is killed with SIGKILL: the
// values it wrote go with its memory (the index finds their handles stale and drops them,
// never returning another process's bytes), every other value reads back intact, and the
// killed worker's memory is back in the pool. It prints what happened.
//
//	go run ./examples/sharedkv                 # 6 MiB pool, 4 KiB values, 400 operations
//	go run ./examples/sharedkv -ops 2000 -keys 64
//
// The sizes are small so that it runs as an ordinary user with the usual 8 MiB memlock limit
// (ulimit -l 8192): the owner locks the 6 MiB pool, each worker locks the pages it touches.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinmalloc/pinmalloc/ipcpool"
)

// workerEnv, set to the pool's socket, makes this program a worker.
const workerEnv = "SHAREDKV_WORKER"

func main() {
	size := flag.Int("pool", 6<<20, "pool size in bytes")
	valueSize := flag.Int("value", 4096, "value size in bytes")
	ops := flag.Int("ops", 400, "operations")
	keys := flag.Int("keys", 32, "distinct keys")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if path := os.Getenv(workerEnv); path != "" {
		if err := runWorker(path); err != nil {
			fmt.Println("E", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Stdout, uintptr(*size), *valueSize, *ops, *keys, *seed); err != nil {
		log.Fatal(err)
	}
}

// value is what key k holds at version v: bytes any process can recompute.
func value(b []byte, k, v int) {
	r := rand.New(rand.NewPCG(uint64(k), uint64(v)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func hstr(h ipcpool.Handle) string {
	return fmt.Sprintf("%d %d %d %d %d", h.Pool, h.Entry, h.Gen, h.Offset, h.Length)
}

func parseHandle(f []string) (h ipcpool.Handle, err error) {
	var v [5]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return h, err
		}
	}
	return ipcpool.Handle{Pool: v[0], Entry: uint32(v[1]), Gen: uint32(v[2]), Offset: v[3], Length: v[4]}, nil
}

// runWorker attaches and obeys the owner's commands, one a line:
//
//	W key version size   write the value into a new block: "H <handle>"
//	R key version <handle>  read a block by handle and check it: "OK", "STALE", "BAD"
//	Q                    detach: "OK"
func runWorker(path string) error {
	p, err := ipcpool.Attach(context.Background(), path, ipcpool.AttachOptions{})
	if err != nil {
		return err
	}
	fmt.Println("READY", p.Slot(), os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 4 && f[0] == "W":
			k, _ := strconv.Atoi(f[1])
			v, _ := strconv.Atoi(f[2])
			n, _ := strconv.Atoi(f[3])
			b, err := p.Alloc(n)
			if err != nil {
				fmt.Println("E", err)
				continue
			}
			value(b, k, v)
			h, err := p.Handle(b)
			if err != nil {
				fmt.Println("E", err)
				continue
			}
			fmt.Println("H", hstr(h))
		case len(f) == 8 && f[0] == "R":
			k, _ := strconv.Atoi(f[1])
			v, _ := strconv.Atoi(f[2])
			h, _ := parseHandle(f[3:])
			b, err := p.Bytes(h)
			if errors.Is(err, ipcpool.ErrStaleHandle) {
				fmt.Println("STALE")
				continue
			}
			if err != nil {
				fmt.Println("E", err)
				continue
			}
			want := make([]byte, len(b))
			value(want, k, v)
			if crc32.ChecksumIEEE(b) != crc32.ChecksumIEEE(want) {
				fmt.Println("BAD")
				continue
			}
			fmt.Println("OK")
		case len(f) == 1 && f[0] == "Q":
			err := p.Close()
			fmt.Println("OK")
			return err
		default:
			fmt.Println("E bad command")
		}
	}
	return p.Close()
}

// worker is the owner's end of a worker process.
type worker struct {
	cmd  *exec.Cmd
	in   io.Writer
	out  *bufio.Scanner
	slot int
	pid  int
	dead bool
}

func (w *worker) do(format string, a ...any) (string, error) {
	if _, err := fmt.Fprintf(w.in, format+"\n", a...); err != nil {
		return "", err
	}
	if !w.out.Scan() {
		return "", fmt.Errorf("worker in slot %d: no answer", w.slot)
	}
	return w.out.Text(), nil
}

func startWorker(path string) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), workerEnv+"="+path)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	if !w.out.Scan() {
		return nil, errors.New("worker did not start")
	}
	if _, err := fmt.Sscanf(w.out.Text(), "READY %d %d", &w.slot, &w.pid); err != nil {
		return nil, fmt.Errorf("worker: %s", w.out.Text())
	}
	return w, nil
}

// entry is the index's record of a key: its version and where its value is.
type entry struct {
	version int
	h       ipcpool.Handle
	writer  int
}

func run(out io.Writer, size uintptr, valueSize, ops, keys int, seed uint64) error {
	dir, err := os.MkdirTemp("", "sharedkv")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "kv.sock")
	pool, err := ipcpool.Serve(path, ipcpool.Options{Size: int(size), Slots: 4})
	if err != nil {
		return err
	}
	defer pool.Close()
	fmt.Fprintf(out, "owner: pool of %d KiB on %s\n", size>>10, path)
	ws := make([]*worker, 2)
	for i := range ws {
		if ws[i], err = startWorker(path); err != nil {
			return err
		}
		defer func(w *worker) {
			if !w.dead {
				_ = w.cmd.Process.Kill()
				_ = w.cmd.Wait()
			}
		}(ws[i])
		fmt.Fprintf(out, "worker %d: pid %d attached in slot %d\n", i, ws[i].pid, ws[i].slot)
	}
	index := map[int]entry{}
	r := rand.New(rand.NewPCG(seed, 0))
	var writes, reads, replaced, stale int
	alive := []int{0, 1}
	for op := 0; op < ops; op++ {
		if op == ops/2 {
			victim := ws[1]
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return err
			}
			_ = victim.cmd.Wait()
			victim.dead = true
			alive = []int{0}
			held := 0
			for _, e := range index {
				if e.writer == 1 {
					held++
				}
			}
			fmt.Fprintf(out, "op %d: worker 1 killed (SIGKILL) holding %d of %d values\n", op, held, len(index))
			for end := time.Now().Add(5 * time.Second); pool.Attached() != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(end) {
					return errors.New("the owner did not see the killed worker leave")
				}
			}
		}
		k := r.IntN(keys)
		w := alive[r.IntN(len(alive))]
		e, ok := index[k]
		if !ok || r.IntN(3) == 0 { // write a new version of k
			line, err := ws[w].do("W %d %d %d", k, e.version+1, valueSize)
			if err != nil {
				return err
			}
			f := strings.Fields(line)
			if len(f) != 6 || f[0] != "H" {
				return fmt.Errorf("worker %d write: %s", w, line)
			}
			h, err := parseHandle(f[1:])
			if err != nil {
				return err
			}
			if ok { // the old version's block goes back to whoever owns it
				if err := pool.FreeHandle(e.h); err == nil {
					replaced++
				} else if !errors.Is(err, ipcpool.ErrStaleHandle) {
					return err
				}
			}
			index[k] = entry{version: e.version + 1, h: h, writer: w}
			writes++
			continue
		}
		line, err := ws[w].do("R %d %d %s", k, e.version, hstr(e.h))
		if err != nil {
			return err
		}
		switch line {
		case "OK":
			reads++
		case "STALE": // written by the killed worker: its memory is gone, and so is the value
			delete(index, k)
			stale++
		default:
			return fmt.Errorf("worker %d read of key %d: %s", w, k, line)
		}
	}
	// The store is consistent: every value left reads back as written, from the owner too.
	lost := 0
	for k, e := range index {
		b, err := pool.Bytes(e.h)
		if errors.Is(err, ipcpool.ErrStaleHandle) {
			delete(index, k)
			lost++
			continue
		}
		if err != nil {
			return err
		}
		want := make([]byte, len(b))
		value(want, k, e.version)
		if crc32.ChecksumIEEE(b) != crc32.ChecksumIEEE(want) {
			return fmt.Errorf("key %d: value corrupted", k)
		}
	}
	fmt.Fprintf(out, "done: %d writes, %d reads by handle, %d old versions freed across processes, %d values lost with the killed worker (%d found at a read, %d at the final check)\n",
		writes, reads, replaced, stale+lost, stale, lost)
	fmt.Fprintf(out, "store: %d values, all intact\n", len(index))
	for _, e := range index {
		if err := pool.FreeHandle(e.h); err != nil {
			return err
		}
	}
	if line, err := ws[0].do("Q"); err != nil || line != "OK" {
		return fmt.Errorf("worker 0 detach: %s %v", line, err)
	}
	_ = ws[0].cmd.Wait()
	ws[0].dead = true
	for end := time.Now().Add(5 * time.Second); pool.Attached() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return errors.New("worker 0 did not leave")
		}
	}
	pool.Collect()
	pool.Trim()
	st := pool.SharedStats()
	fmt.Fprintf(out, "memory: the workers hold nothing of the pool now; the owner holds %d KiB of %d KiB, %d live buffers\n",
		st.Grants>>10, size>>10, pool.Pool.Stats().Live)
	return pool.Close()
}
