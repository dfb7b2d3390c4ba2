// Loadweights streams a file through pinned buffers the way a Go inference server loads model
// weights: one goroutine reads the file in chunks into buffers from a pinned.Pool, and workers
// copy each chunk to GPU memory when a CUDA driver is present (or just checksum it without
// one) and free the buffer from their own goroutine. The reads use O_DIRECT where the file
// system allows it: the pool's 4 KiB alignment is what O_DIRECT asks of a buffer.
//
//	go run ./examples/loadweights                      # a 256 MiB temporary file
//	go run ./examples/loadweights -file model.safetensors -chunk 4194304 -workers 8
//
// The pool's memory stays bounded by the chunks in flight, whatever the file's size: at most
// (-inflight + -workers + 1) buffers of -chunk bytes are live (queued, being consumed, being
// read), which the example counts (each buffer from before its Alloc to after its Free),
// prints and checks, and the pool commits them and the freed ones it keeps for reuse until
// the purge delay passes (its peak committed, printed too, may be a few chunks above the live
// bound). The defaults keep the live buffers at 5 MiB, within the 8 MiB
// `ulimit -l` an ordinary user has (where the limit refuses a commit, the pool gives back what
// it keeps and commits again); bigger chunks or more of them need a bigger limit without a
// GPU (with one, the pool is CUDA pinned memory, which RLIMIT_MEMLOCK does not count). The
// checksums of what went through the buffers are checked against a plain read of the file.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"hash/crc32"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// chunk is one piece of the file in a pinned buffer.
type chunk struct {
	buf []byte // exactly as Alloc returned it: Free wants the whole buffer
	n   int    // bytes read into it
	idx int    // chunk index in the file
}

// onDevice is a chunk's copy in device memory.
type onDevice struct {
	ptr    uintptr
	n, idx int
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed
		}
		if errors.As(err, new(flagError)) {
			fmt.Fprintln(os.Stderr, "loadweights:", err)
			os.Exit(2)
		}
		log.Fatal(err)
	}
}

func run(args []string, out io.Writer) (err error) {
	fs := flag.NewFlagSet("loadweights", flag.ContinueOnError)
	path := fs.String("file", "", "file to load (default: a temporary file of -size bytes)")
	size := fs.Int64("size", 256<<20, "size of the temporary file")
	chunkSize := fs.Int("chunk", 1<<20, "bytes per read (a multiple of 4096 for O_DIRECT)")
	workers := fs.Int("workers", 2, "goroutines that consume chunks")
	inFlight := fs.Int("inflight", 2, "chunks read ahead of the workers")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: loadweights [flags]\n\n"+
			"Reads a file through pinned buffers and checks every chunk. At most\n"+
			"(inflight + workers + 1) x chunk of buffers are live: 5 MiB with the defaults, within an\n"+
			"ordinary user's 8 MiB ulimit -l. Without a GPU the buffers are mlock'ed memory: raise\n"+
			"the limit (ulimit -l) before raising these.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkFlags(*size, *chunkSize, *workers, *inFlight); err != nil {
		return err
	}

	if *path == "" {
		var stop func()
		tmp, err := tempFile(*size, func(name string) { stop = removeOnInterrupt(name) })
		if stop != nil {
			defer stop() // after the Remove below: no interrupt between them leaves the file
		}
		if err != nil {
			return err
		}
		defer os.Remove(tmp)
		*path = tmp
	}
	f, direct, err := openDirect(*path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	nchunks := int((st.Size() + int64(*chunkSize) - 1) / int64(*chunkSize))
	// The reader holds one buffer, the channel -inflight, each worker one: the pool's bound.
	maxBufs := *inFlight + *workers + 1
	// Buffers held by the pipeline now, and the most at once: each counted from before its Alloc
	// to after its Free returns, so the pool's live buffers are never more than the count.
	var live, maxLive atomic.Int64

	// Auto: memory registered with CUDA (cuMemHostRegister) when a driver is present, so that
	// copies to the GPU run at DMA speed; mmap+mlock otherwise.
	pool, err := pinned.New(pinned.Options{Backend: pinned.Auto, Align: 4096})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pool.Close()) }() // reports buffers still live
	var (
		mu       sync.Mutex
		onGPU    []onDevice // device copies of the chunks, as a loaded model would keep them
		firstErr error
	)
	gpu, gerr := device.Open(0, device.Options{})
	if gerr != nil {
		if !noGPU(gerr) { // a driver that loads and fails is a fault to report, not a machine without a GPU
			return fmt.Errorf("the CUDA driver is present but device 0 does not open: %w", gerr)
		}
		gpu = nil
		fmt.Fprintf(out, "no GPU (%v): chunks are checksummed in pinned memory only\n", gerr)
	} else {
		defer func() { // on every path: a device heap with live blocks would not close
			for _, c := range onGPU {
				err = errors.Join(err, gpu.Free(pcuda.DevicePtr(c.ptr)))
			}
			err = errors.Join(err, gpu.Close())
		}()
	}

	sums := make([]uint32, nchunks)
	fail := func(err error) {
		mu.Lock()
		firstErr = cmp.Or(firstErr, err)
		mu.Unlock()
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	work := make(chan chunk, *inFlight)
	var wg sync.WaitGroup
	start := time.Now()
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				sums[c.idx] = crc32.ChecksumIEEE(c.buf[:c.n])
				if gpu != nil {
					if d, err := gpu.Alloc(int(c.n), 0); err != nil {
						fail(err)
					} else {
						mu.Lock()
						onGPU = append(onGPU, onDevice{uintptr(d), c.n, c.idx})
						mu.Unlock()
						if err := gpu.HtoD(d, c.buf[:c.n]); err != nil {
							fail(err)
						}
					}
				}
				// Freed on this goroutine, allocated on the reader's: the pool takes it back
				// without a lock.
				if err := pool.Free(c.buf); err != nil {
					fail(err)
				}
				live.Add(-1) // after the Free: live never undercounts the pool's buffers
			}
		}()
	}
	for i := 0; i < nchunks && !failed(); i++ {
		if n := live.Add(1); n > maxLive.Load() { // before the Alloc: live never undercounts
			maxLive.Store(n) // only this goroutine stores
		}
		buf, err := pool.Alloc(*chunkSize)
		if err != nil {
			live.Add(-1)
			fail(err) // under a small RLIMIT_MEMLOCK it says which limit and how to raise it
			break
		}
		n, err := readAt(f, buf, int64(i)*int64(*chunkSize))
		if err != nil {
			fail(errors.Join(err, pool.Free(buf)))
			break
		}
		work <- chunk{buf: buf, n: n, idx: i}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return firstErr
	}

	ps := pool.Stats()
	fmt.Fprintf(out, "loaded %s in %d chunks (O_DIRECT: %s) with %d workers: %s/s\n",
		amount(st.Size()), nchunks, yesNo(direct), *workers, amount(int64(float64(st.Size())/elapsed.Seconds())))
	fmt.Fprintf(out, "pool (%s): at most %d buffers held at once (each from before its Alloc to after its Free), "+
		"peak committed %s (live buffers and freed ones kept for reuse) for a %s file\n"+
		"  (bound: %d in flight + %d workers + 1 being read = %d buffers of %d KiB, %.1f MiB); %d allocs, %d frees\n",
		ps.Backend, maxLive.Load(), amount(int64(ps.PeakCommitted)), amount(st.Size()),
		*inFlight, *workers, maxBufs, *chunkSize>>10, mib(uint64(maxBufs)*uint64(*chunkSize)), ps.Allocs, ps.Frees)
	if maxLive.Load() > int64(maxBufs) {
		return fmt.Errorf("%d buffers were held at once, more than the %d the pipeline allows", maxLive.Load(), maxBufs)
	}
	if gpu != nil {
		gs := gpu.Stats()
		fmt.Fprintf(out, "GPU: %d chunks in device memory, %d MiB committed\n", len(onGPU), gs.Arena.Committed>>20)
		back := make([]byte, *chunkSize)
		for _, c := range onGPU {
			if err := gpu.DtoH(back[:c.n], pcuda.DevicePtr(c.ptr)); err != nil {
				return err
			}
			if crc32.ChecksumIEEE(back[:c.n]) != sums[c.idx] {
				return fmt.Errorf("chunk %d: the device copy differs from what was read", c.idx)
			}
		}
		fmt.Fprintln(out, "every device copy read back matches")
	}
	if err := verify(*path, *chunkSize, sums); err != nil {
		return err
	}
	fmt.Fprintln(out, "checksums match a plain read of the file")
	return nil
}

// mib converts bytes to MiB.
func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// openDirect opens path with O_DIRECT, or without it where the file system refuses it (tmpfs
// and some overlay file systems do).
func openDirect(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err == nil {
		return f, true, nil
	}
	f, err = os.Open(path)
	return f, false, err
}

// readAt fills buf from off with pread, stopping early only at the end of the file. (With
// O_DIRECT a read comes back short only there, and os.File.ReadAt would then retry at an
// unaligned offset, which O_DIRECT refuses.)
func readAt(f *os.File, buf []byte, off int64) (int, error) {
	fd := int(f.Fd())
	n := 0
	for n < len(buf) {
		m, err := syscall.Pread(fd, buf[n:], off+int64(n))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("read %s at %d: %w", f.Name(), off+int64(n), err)
		}
		if m == 0 || m%4096 != 0 {
			return n + m, nil // the end of the file
		}
		n += m
	}
	return n, nil
}

// tempFile writes a file of size bytes of varied content and returns its name.
func tempFile(size int64, created func(name string)) (string, error) {
	f, err := os.CreateTemp("", "pinmalloc-weights-*.bin")
	if err != nil {
		return "", err
	}
	defer f.Close()
	created(f.Name())
	block := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(block)) {
		for i := range block {
			block[i] = byte(off>>20) ^ byte(i*31)
		}
		n := min(int64(len(block)), size-off)
		if _, err := f.Write(block[:n]); err != nil {
			os.Remove(f.Name())
			return "", err
		}
	}
	return f.Name(), nil
}

// verify reads path with ordinary buffered I/O and compares each chunk's checksum.
func verify(path string, chunkSize int, sums []uint32) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, chunkSize)
	for i, want := range sums {
		n, err := io.ReadFull(f, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return err
		}
		if got := crc32.ChecksumIEEE(buf[:n]); got != want {
			return fmt.Errorf("chunk %d: checksum %#x through the pool, %#x read plainly", i, want, got)
		}
	}
	return nil
}

// noGPU reports whether err, from opening device 0, says there is no GPU to use: no driver, or a
// driver with no device. Any other error is a driver present and failing.
func noGPU(err error) bool {
	return errors.Is(err, device.ErrNoDriver) || errors.Is(err, pcuda.ErrNoDevice)
}

// yesNo says b as a newcomer reads it.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no, the file system refused it"
}
