package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/ipcpool"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// poolOptions is the pool: 8 MiB in grants of 2 MiB, small enough for an 8 MiB memlock limit.
func poolOptions() ipcpool.Options {
	return ipcpool.Options{Size: 8 << 20, GrantSize: 2 << 20, Slots: 8, Exports: 2048, FallbackPageable: true}
}

// runOwner serves the pool at path, adopting it from its keeper and workers when adopt is
// set, says "READY <pool> <µs>" and serves until its stdin closes, then closes the pool (which
// fails with ipcpool.ErrAttached while another process is attached).
func runOwner(path string, adopt bool) error {
	o := poolOptions()
	if adopt {
		o.Adopt, o.Timeout = 10*time.Second, time.Second
	}
	start := time.Now()
	w, err := ipcpool.Serve(path, o)
	if err != nil {
		return err
	}
	fmt.Println("READY", strconv.FormatUint(w.ID(), 16), time.Since(start).Microseconds())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		ps := w.SharedStats().Pool
		fmt.Println("P", ps.Processes, ps.Held, ps.Free+ps.Fenced, ps.Orphaned)
	}
	return w.Close()
}

// runKeeper holds the pool at path until its stdin closes.
func runKeeper(path string) error {
	k, err := ipcpool.Keep(context.Background(), path, ipcpool.AttachOptions{FallbackPageable: true})
	if err != nil {
		return err
	}
	fmt.Println("READY")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println("R", k.Rejoined())
	}
	return k.Close()
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
	if len(f) < 5 {
		return h, errors.New("a handle of fewer than 5 fields")
	}
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return h, err
		}
	}
	return ipcpool.Handle{Pool: v[0], Entry: uint32(v[1]), Gen: uint32(v[2]), Offset: v[3], Length: v[4]}, nil
}

// runWorker attaches to the pool at path and obeys the coordinator, one command a line:
//
//	W key version size        write the value into a new buffer: "H <handle>"
//	R key version <handle>    read a buffer by handle and check it: "OK", "STALE", "BAD"
//	F <handle>                let the value go (FreeHandle): "OK", "STALE"
//	T <handle>, U <handle>    retain it, release it: "OK", "STALE"
//	G                         the pool memory this worker holds: "G <bytes> <rejoined>"
//	Q                         leave (Process.Close): "OK", or "E <error>"
func runWorker(path string) error {
	// One shard: each shard of a process's pool takes grants of its own, and this pool has four.
	p, err := ipcpool.Attach(context.Background(), path, ipcpool.AttachOptions{FallbackPageable: true, Pool: pinned.Options{Shards: 1}})
	if err != nil {
		return err
	}
	fmt.Println("READY", p.Slot(), os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 1 && f[0] == "Q" {
			err := p.Close()
			if err != nil {
				fmt.Println("E", err) // the coordinator reports it: an OK would hide a failed Close
			} else {
				fmt.Println("OK")
			}
			return err
		}
		fmt.Println(workerCommand(p, f))
	}
	return p.Close()
}

func workerCommand(p *ipcpool.Process, f []string) string {
	answer := func(err error) string {
		switch {
		case err == nil:
			return "OK"
		case errors.Is(err, ipcpool.ErrStaleHandle):
			return "STALE"
		}
		return "E " + err.Error()
	}
	switch {
	case len(f) == 4 && f[0] == "W":
		k, _ := strconv.Atoi(f[1])
		v, _ := strconv.Atoi(f[2])
		n, _ := strconv.Atoi(f[3])
		b, err := p.Alloc(n)
		if err != nil {
			return answer(err)
		}
		value(b, k, v)
		h, err := p.Handle(b)
		if err != nil {
			return answer(err)
		}
		return "H " + hstr(h)
	case len(f) == 8 && f[0] == "R":
		k, _ := strconv.Atoi(f[1])
		v, _ := strconv.Atoi(f[2])
		h, err := parseHandle(f[3:])
		if err != nil {
			return answer(err)
		}
		b, err := p.Bytes(h)
		if err != nil {
			return answer(err)
		}
		want := make([]byte, len(b))
		value(want, k, v)
		if crc32.ChecksumIEEE(b) != crc32.ChecksumIEEE(want) {
			return "BAD"
		}
		return "OK"
	case len(f) == 6 && (f[0] == "F" || f[0] == "T" || f[0] == "U"):
		h, err := parseHandle(f[1:])
		if err != nil {
			return answer(err)
		}
		switch f[0] {
		case "F":
			return answer(p.FreeHandle(h))
		case "T":
			return answer(p.Retain(h))
		}
		return answer(p.Release(h))
	case len(f) == 1 && f[0] == "G":
		return fmt.Sprintf("G %d %d", p.SharedStats().GrantBytes, p.Rejoined())
	}
	return "E bad command"
}
