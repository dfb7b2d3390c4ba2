package copyengine

// MethodKernel: the gather kernel (gather_ptx.go) loaded once per Batcher, its grid bounded
// by the options, and one launch per batch over a job array written to a staging buffer
// (ring.go).

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

const (
	defaultBlockThreads = 256
	maxGrid             = 1<<31 - 1
)

// loadKernel loads the gather kernel's PTX for the device's architecture.
func (b *Batcher) loadKernel() error {
	major, err := b.dev.Attribute(icuda.AttrComputeCapabilityMajor)
	if err != nil {
		return err
	}
	minor, err := b.dev.Attribute(icuda.AttrComputeCapabilityMinor)
	if err != nil {
		return err
	}
	sm := gatherTarget(major, minor)
	if sm == 0 {
		return fmt.Errorf("compute capability %d.%d is too old for the gather kernel", major, minor)
	}
	mapped, err := b.dev.Attribute(icuda.AttrCanMapHostMemory)
	if err != nil {
		return fmt.Errorf("asking whether the device maps host memory for the kernel's job arrays: %w", err)
	}
	if mapped == 0 {
		return errors.New("the device cannot map host memory for the kernel's job arrays")
	}
	mod, err := b.dev.ModuleLoadData(gatherPTX(sm))
	if err != nil {
		return fmt.Errorf("loading the gather kernel (sm_%d): %w", sm, err)
	}
	fn, err := b.dev.ModuleGetFunction(mod, gatherEntry)
	if err != nil {
		return errors.Join(fmt.Errorf("the gather kernel: %w", err), b.dev.ModuleUnload(mod))
	}
	b.mod, b.fn = mod, fn
	return nil
}

// boundGrid makes the low-priority stream and sets the kernel's grid bound from MaxBlocks,
// LowPriority (2 blocks per multiprocessor when MaxBlocks is 0) and SMShare.
func (b *Batcher) boundGrid(share float64) error {
	sms := 0
	if b.low || share > 0 {
		n, err := b.dev.Attribute(icuda.AttrMultiprocessorCount)
		if err != nil || n <= 0 {
			n = 16
		}
		sms = n
	}
	if b.low {
		if err := b.lowPriority(); err != nil {
			return err
		}
		if b.blocks == 0 {
			b.blocks = 2 * sms
		}
	}
	if share > 0 {
		capped := max(1, int(share*float64(sms)))
		if b.blocks == 0 || capped < b.blocks {
			b.blocks = capped
		}
	}
	b.blocks = min(b.blocks, maxGrid)
	return nil
}

// launch queues the kernel over jobs.
func (b *Batcher) launch(jobs []Job, s cuda.Stream) error {
	st, err := b.stage(len(jobs))
	if err != nil {
		return err
	}
	buf := mem.Bytes(st.host, uintptr(len(jobs))*jobBytes)
	for i, j := range jobs {
		w := buf[i*jobBytes : i*jobBytes+jobBytes]
		binary.NativeEndian.PutUint64(w[0:], uint64(j.Dst))
		binary.NativeEndian.PutUint64(w[8:], uint64(j.Src))
		binary.NativeEndian.PutUint64(w[16:], uint64(j.Len))
	}
	grid := len(jobs)
	if b.blocks > 0 && grid > b.blocks {
		grid = b.blocks
	}
	if grid > maxGrid {
		grid = maxGrid
	}
	on := s
	if b.low { // the low-priority stream boundGrid made (a legacy-stream batch's is not one)
		if err := b.fence(s, cuda.Stream(b.side)); err != nil {
			return err
		}
		on = cuda.Stream(b.side)
	}
	err = b.dev.LaunchKernel(b.fn, icuda.Dim3{X: uint32(grid), Y: 1, Z: 1}, icuda.Dim3{X: uint32(b.threads), Y: 1, Z: 1}, 0, uintptr(on),
		uint64(st.dptr), uint64(len(jobs)))
	if err != nil {
		return fmt.Errorf("copyengine: kernel copy of %d jobs: %w", len(jobs), err)
	}
	if err := b.dev.EventRecord(st.ev, uintptr(on)); err != nil {
		// The kernel is queued and reads st: wait for it, or the next Copy would write its
		// jobs into st under it. Where no wait can confirm it done, st leaves the ring.
		err = fmt.Errorf("copyengine: kernel copy of %d jobs: recording its staging event: %w", len(jobs), err)
		if werr := b.wait(on, s); werr != nil {
			b.lose(st, uintptr(on))
			return errors.Join(err, werr)
		}
		return err
	}
	st.busy = true
	if on != s {
		if err := b.fence(on, s); err != nil {
			return b.settle(on, s, err)
		}
	}
	return nil
}
