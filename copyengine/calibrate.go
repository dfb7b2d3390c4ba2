package copyengine

// The copy engine's calibration: which of the Batcher's methods is fastest for a batch.
//
// MethodAuto times every method the driver has (the gather kernel, one cuMemcpyBatchAsync call,
// one cuMemcpyAsync per job) at the block sizes calSizes and the batch lengths calCounts, each
// batch moved to the device and back, and Copy then picks, for each batch, the method of the
// cell nearest its mean block size and its length (nearest on a log scale). The timing is done
// with events on a stream of the calibration's own, so it measures the device's time, which
// includes the gaps while the CPU queues per-job calls; on the fake driver those are its timing
// model's figures (internal/fakecuda, cost.go), which tests set to decide what must be chosen.
//
// A cell moves at most calBytes a batch: a cell whose count of blocks is more is timed with
// fewer jobs (CalibrationCell.Jobs), and cells that come to the same batch are timed once.
// calBytes of pinned host memory (mapped for the device) and of device memory are allocated for
// the calibration and freed after it; freeing them synchronizes the context, as cuMemFree does.
// On an H100 the whole calibration is some tens of milliseconds, most of it the per-copy
// method's thousands of calls at 4 KiB.
//
// Invariants: a calibration is made once per device, kernel configuration (threads per block,
// grid bound, stream priority) and set of methods the driver has, in a process: Batchers that
// share those share it (calibrations below, under calMu, which is held while one is made so
// that two Batchers never calibrate the same device at once and disturb each other's timings).
// A calibration that failed is not kept: the next Batcher tries again. A Calibration is never
// changed once made, so Copy reads it without a lock.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// What the calibration times.
var (
	calSizes  = []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 2 << 20}
	calCounts = []int{16, 128, 1024}
)

const (
	calBytes = 4 << 20 // the most bytes a timed batch moves
	calReps  = 2       // timed round trips per cell and method, after one untimed
)

// Calibration is what a Batcher measured: for each block size and batch length, the bandwidth
// of every method the driver has and the fastest. Its String is a table.
type Calibration struct {
	// Sizes are the block sizes timed, Counts the batch lengths.
	Sizes  []int
	Counts []int
	// Cells are the cells, Sizes major: Cells[i*len(Counts)+j] is Sizes[i] and Counts[j].
	Cells []CalibrationCell
	// Took is how long the calibration took, allocations included.
	Took time.Duration

	only                  Method    // the method every cell chose, else MethodAuto
	sizeBound, countBound []float64 // the geometric midpoints between neighbours (Choice)
}

// CalibrationCell is one block size and batch length.
type CalibrationCell struct {
	Size  int
	Count int
	// Jobs is the number of blocks each timed batch had: Count, or fewer where Count blocks
	// would move more than the calibration's batch (4 MiB).
	Jobs int
	// GBps is the bandwidth (10^9 bytes a second, both ways) each method reached, indexed by
	// Method; 0 for MethodAuto and for a method the driver does not have.
	GBps [MethodPerCopy + 1]float64
	// Choice is the fastest method.
	Choice Method
}

// Choice returns the method of the cell nearest (on a log scale) a batch of count blocks of
// size bytes each.
func (c *Calibration) Choice(size, count int) Method {
	i := nearest(c.sizeBound, float64(size))
	j := nearest(c.countBound, float64(count))
	return c.Cells[i*len(c.Counts)+j].Choice
}

// nearest returns the index of the first bound above x: bounds[k] is the midpoint between
// neighbours k and k+1.
func nearest(bounds []float64, x float64) int {
	for k, b := range bounds {
		if x < b {
			return k
		}
	}
	return len(bounds)
}

// midpoints returns the geometric midpoints between neighbours of xs.
func midpoints(xs []float64) []float64 {
	m := make([]float64, len(xs)-1)
	for i := range m {
		m[i] = math.Sqrt(xs[i] * xs[i+1])
	}
	return m
}

// String returns the calibration as a table: one row per block size, one column per batch
// length, each cell the method chosen and the bandwidth of each method.
func (c *Calibration) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "copy engine calibration (%v), GB/s both ways: kernel / batch-api / per-copy, the fastest chosen\n", c.Took.Round(time.Millisecond))
	for _, cell := range c.Cells {
		fmt.Fprintf(&b, "  %7s x %4d (timed with %4d jobs): %-9s", sizeName(cell.Size), cell.Count, cell.Jobs, cell.Choice)
		for m := MethodKernel; m <= MethodPerCopy; m++ {
			if cell.GBps[m] == 0 {
				fmt.Fprintf(&b, " %8s", "-")
			} else {
				fmt.Fprintf(&b, " %8.2f", cell.GBps[m])
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// sizeName writes a power-of-two size in KiB or MiB.
func sizeName(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// calKey identifies what a calibration is valid for.
type calKey struct {
	ordinal         int
	ctx             uintptr
	threads, blocks int
	low             bool
	kernel, batch   bool
}

var (
	calMu        sync.Mutex
	calibrations = map[calKey]*Calibration{}
)

// calibrationFor returns the calibration of b's device and configuration, making it first if
// this process has none.
func calibrationFor(b *Batcher) (*Calibration, error) {
	k := calKey{b.dev.Ordinal(), b.dev.Context(), b.threads, b.blocks, b.low, b.kernel, b.batchOK}
	calMu.Lock()
	defer calMu.Unlock()
	if c := calibrations[k]; c != nil {
		return c, nil
	}
	c, err := b.calibrate()
	if err != nil {
		return nil, fmt.Errorf("copyengine: calibrating the copy engine (using %s for every batch): %w", b.static, err)
	}
	calibrations[k] = c
	return c, nil
}

// forgetCalibrations drops every calibration made, for tests that change the fake's timings.
func forgetCalibrations() {
	calMu.Lock()
	defer calMu.Unlock()
	clear(calibrations)
}

// calRun is what the calibration allocated.
type calRun struct {
	b        *Batcher
	host     uintptr         // calBytes of pinned host memory
	hostDev  icuda.DevicePtr // its device address
	dev      icuda.DevicePtr // calBytes of device memory
	s        icuda.Stream
	e0, e1   icuda.Event
	up, down []Job
}

// calibrate times b's methods (see the file comment).
func (b *Batcher) calibrate() (c *Calibration, err error) {
	start := time.Now()
	r := &calRun{b: b}
	defer func() { err = errors.Join(err, r.free()) }()
	if err := r.alloc(); err != nil {
		return nil, err
	}
	c = &Calibration{Sizes: calSizes, Counts: calCounts}
	timed := map[[2]int][MethodPerCopy + 1]float64{} // by size and jobs
	for _, size := range calSizes {
		for _, count := range calCounts {
			cell := CalibrationCell{Size: size, Count: count, Jobs: max(1, min(count, int(calBytes/size)))}
			key := [2]int{size, cell.Jobs}
			gbps, ok := timed[key]
			if !ok {
				if gbps, err = r.cell(size, cell.Jobs); err != nil {
					return nil, fmt.Errorf("%s x %d: %w", sizeName(size), cell.Jobs, err)
				}
				timed[key] = gbps
			}
			cell.GBps, cell.Choice = gbps, MethodAuto
			for m := MethodKernel; m <= MethodPerCopy; m++ { // ties go to the earlier method
				if gbps[m] > 0 && (cell.Choice == MethodAuto || gbps[m] > gbps[cell.Choice]) {
					cell.Choice = m
				}
			}
			c.Cells = append(c.Cells, cell)
		}
	}
	c.only = c.Cells[0].Choice
	for _, cell := range c.Cells {
		if cell.Choice != c.only {
			c.only = MethodAuto
		}
	}
	sizes, counts := make([]float64, len(calSizes)), make([]float64, len(calCounts))
	for i, s := range calSizes {
		sizes[i] = float64(s)
	}
	for i, n := range calCounts {
		counts[i] = float64(n)
	}
	c.sizeBound, c.countBound = midpoints(sizes), midpoints(counts)
	c.Took = time.Since(start)
	return c, nil
}

// alloc allocates the calibration's buffers, stream and events. An event the driver cannot make
// (cuEventCreate refused) is streamq.ErrNoEvent (pinmalloc.ErrRefused; the driver's error, kept,
// matches pinmalloc.ErrOutOfMemory when memory ran out).
func (r *calRun) alloc() (err error) {
	d := r.b.dev
	defer d.RelaxCapture()() // beside a user's capture, as cudamem's calls (doc.go)
	if r.host, err = d.MemHostAlloc(calBytes, icuda.HostAllocDeviceMap|icuda.HostAllocPortable); err != nil {
		return err
	}
	if r.hostDev, err = d.MemHostGetDevicePointer(r.host); err != nil {
		return err
	}
	if r.dev, err = d.MemAlloc(calBytes); err != nil {
		return err
	}
	if r.s, err = d.StreamCreate(true); err != nil {
		return err
	}
	if r.e0, err = d.EventCreate(false); err == nil {
		r.e1, err = d.EventCreate(false)
	}
	if err != nil { // the driver's want or refusal (pinmalloc.ErrRefused), as a stream's check says it
		return fmt.Errorf("%w to time the methods with: %w", streamq.ErrNoEvent, err)
	}
	return nil
}

// free frees what alloc allocated. What the driver refuses to free or destroy the Batcher
// keeps, for Close to free: a pinned buffer joins its retired staging buffers, the rest b.held.
func (r *calRun) free() error {
	d, h := r.b.dev, &r.b.held
	defer d.RelaxCapture()() // beside a user's capture, as cudamem's calls (doc.go)
	var errs []error
	if r.s != 0 {
		errs = append(errs, d.StreamSynchronize(r.s))
		if err := d.StreamDestroy(r.s); err != nil {
			h.streams = append(h.streams, r.s)
			errs = append(errs, fmt.Errorf("destroying its stream (kept until Close): %w", err))
		}
	}
	for _, ev := range []icuda.Event{r.e0, r.e1} {
		if ev == 0 {
			continue
		}
		if err := d.EventDestroy(ev); err != nil {
			h.events = append(h.events, ev)
			errs = append(errs, fmt.Errorf("destroying its event (kept until Close): %w", err))
		}
	}
	if r.dev != 0 {
		if err := d.MemFree(r.dev); err != nil {
			h.dev = append(h.dev, r.dev)
			errs = append(errs, fmt.Errorf("freeing its device buffer (kept until Close): %w", err))
		}
	}
	if r.host != 0 {
		if err := d.MemFreeHost(r.host); err != nil { // kept, for the Batcher's Close to free
			r.b.retired = append(r.b.retired, &stage{host: r.host})
			errs = append(errs, fmt.Errorf("freeing its pinned buffer (kept until Close): %w", err))
		}
	}
	return errors.Join(errs...)
}

// cell times every method the driver has on jobs blocks of size bytes to the device and back,
// the blocks in a random order on the device side as a tier's are.
func (r *calRun) cell(size, jobs int) (gbps [MethodPerCopy + 1]float64, err error) {
	perm := rand.New(rand.NewPCG(uint64(size), uint64(jobs))).Perm(jobs)
	r.up, r.down = r.up[:0], r.down[:0]
	for i, p := range perm {
		h, d := cuda.DevicePtr(r.hostDev+uintptr(i*size)), cuda.DevicePtr(r.dev+uintptr(p*size))
		r.up = append(r.up, Job{Dst: d, Src: h, Len: size})
		r.down = append(r.down, Job{Dst: h, Src: d, Len: size})
	}
	for m := MethodKernel; m <= MethodPerCopy; m++ {
		if (m == MethodKernel && !r.b.kernel) || (m == MethodBatchAPI && !r.b.batchOK) {
			continue
		}
		ns, err := r.time(m)
		if err != nil {
			return gbps, fmt.Errorf("%s: %w", m, err)
		}
		gbps[m] = float64(2*calReps*jobs) * float64(size) / max(ns, 1)
	}
	return gbps, nil
}

// time returns the ns calReps round trips take with method m, after one untimed.
func (r *calRun) time(m Method) (float64, error) {
	d := r.b.dev
	trip := func() error {
		for _, jobs := range [][]Job{r.up, r.down} {
			var err error
			switch m {
			case MethodKernel:
				err = r.b.launch(jobs, cuda.Stream(r.s))
			case MethodBatchAPI:
				err = r.b.batch(jobs, cuda.Stream(r.s))
			default:
				err = r.b.perCopy(jobs, cuda.Stream(r.s))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := trip(); err != nil {
		return 0, err
	}
	if err := d.EventRecord(r.e0, r.s); err != nil {
		return 0, err
	}
	for range calReps {
		if err := trip(); err != nil {
			return 0, err
		}
	}
	if err := d.EventRecord(r.e1, r.s); err != nil {
		return 0, err
	}
	if err := d.EventSynchronize(r.e1); err != nil {
		return 0, err
	}
	ms, err := d.EventElapsed(r.e0, r.e1)
	return float64(ms) * 1e6, err
}
