// Command pinmalloc-user is a program in a module of its own that uses the public packages of
// pinmalloc (pinned, heap, arena, cudamem, device, cuda; its tests uvm and cuda/cudatest) through
// public names only, as a program outside the repository would. CI builds it and runs its tests, so
// the public API stays usable from outside: a signature that names an internal type would not
// compile here.
//
//	cd examples/external && go run .
//
// Without a GPU it runs the host part and says why the GPU part was skipped. Its tests run the
// GPU part, and tests of device heaps and a uvm tier, on pinmalloc's fake CUDA driver through
// the public package cuda/cudatest, as a program's own CI without a GPU would.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/pinned"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: pinmalloc-user (cd examples/external && go run .)\n\n"+
			"Uses every public package of pinmalloc from a module of its own: a pinned pool, a heap over\n"+
			"a locked arena (4 MiB each, within an ordinary user's 8 MiB ulimit -l), and on a GPU a\n"+
			"device heap, a stream and copies.\n")
	}
	flag.Parse()
	if err := hostDemo(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("host: pinned pool, heap and arena views: ok")
	dev, err := cuda.Open(0)
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		fmt.Printf("gpu: skipped, no GPU here (%v); `go test .` runs this part on pinmalloc's fake driver\n", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	report, err := gpuDemo(dev)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("gpu:", report)
}

// hostDemo uses the pinned pool, and a heap over an arena of locked host memory viewed through
// the checked []byte views.
func hostDemo() error {
	pool, err := pinned.New(pinned.Options{Capacity: 4 << 20}) // fits the default 8 MiB memlock limit
	if err != nil {
		return err
	}
	buf, err := pool.Alloc(64 << 10)
	if err != nil {
		return errors.Join(err, pool.Close())
	}
	copy(buf, "pinned")
	if err := errors.Join(pool.Free(buf), pool.Close()); err != nil {
		return err
	}

	a, err := arena.New(arena.Options{Provider: arena.LockedHost(arena.HostOptions{}), Capacity: 4 << 20})
	if err != nil {
		return err
	}
	h, err := heap.New(a, heap.Options{Align: 64})
	if err != nil {
		return errors.Join(err, a.Close())
	}
	p, err := h.Alloc(1000)
	if err != nil {
		return errors.Join(err, h.Close(), a.Close())
	}
	b, err := h.Bytes(p) // the block as a []byte: 1000 bytes
	if err == nil {
		copy(b, "heap block")
		var view []byte
		view, err = a.Bytes(p, 10) // the same memory, checked against the arena
		if err == nil && string(view) != "heap block" {
			err = fmt.Errorf("arena view reads %q", view)
		}
	}
	return errors.Join(err, h.Free(p), h.Close(), a.Close())
}

// otherStream stands for a stream type of another binding that is an integer handle (as
// gorgonia.org/cu's Stream was before v0.9.4; a C.CUstream is converted with
// uintptr(unsafe.Pointer(cs)) instead).
type otherStream uintptr

// gpuDemo uses the cuda package's streams and events, a device heap on a stream, the pinned
// pool's CUDA backend as the staging buffer of copies, and the arena's device and managed
// providers.
func gpuDemo(dev *cuda.Device) (string, error) {
	name, err := dev.Name()
	if err != nil {
		return "", err
	}
	free, total, err := dev.MemInfo()
	if err != nil {
		return "", err
	}
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return "", err
	}
	defer dev.StreamDestroy(s)
	myStream := otherStream(s) // as another binding would hold it

	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		return "", err
	}
	if h.Device() != dev {
		return "", errors.Join(errors.New("the heap's Device is not the device given to device.New"), h.Close())
	}
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Device: dev.Ordinal(), Capacity: 4 << 20})
	if err != nil {
		return "", errors.Join(err, h.Close())
	}
	err = roundTrip(dev, h, pool, cuda.Stream(uintptr(myStream)))
	if err == nil {
		err = batched(dev, h, pool, s)
	}
	err = errors.Join(err, h.ForgetStream(s), h.Close(), pool.Close())
	if err != nil {
		return "", err
	}
	if err := providers(dev); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s, %d of %d MiB free: device heap, streams, events, pinned staging, the copy engine and providers: ok",
		name, free>>20, total>>20), nil
}

// roundTrip uploads a pinned buffer into a block of the device heap on stream s, copies it to
// a second block on the same stream, downloads it and checks the bytes.
func roundTrip(dev *cuda.Device, h *device.Heap, pool *pinned.Pool, s cuda.Stream) error {
	const n = 1 << 20
	src, err := pool.Alloc(n)
	if err != nil {
		return err
	}
	dst, err := pool.Alloc(n)
	if err != nil {
		return errors.Join(err, pool.Free(src))
	}
	defer pool.Free(dst)
	defer pool.Free(src)
	for i := range src {
		src[i] = byte(i * 7)
	}
	p, err := h.Alloc(n, s)
	if err != nil {
		return err
	}
	q, err := h.Alloc(n, s)
	if err != nil {
		return errors.Join(err, h.Free(p))
	}
	ev, err := dev.EventCreate()
	if err == nil {
		err = errors.Join(
			h.HtoDAsync(p, src, s),
			h.DtoDAsync(q, p, n, s),
			h.DtoHAsync(dst, q, s),
			dev.EventRecord(ev, s),
			dev.EventSynchronize(ev),
			dev.EventDestroy(ev))
	}
	if err == nil && !bytes.Equal(src, dst) {
		err = errors.New("the bytes that came back differ from those sent")
	}
	return errors.Join(err, h.FreeAsync(p, s), h.FreeAsync(q, s), dev.StreamSynchronize(s), h.Sync())
}

// batched scatters a pinned buffer into four device blocks and gathers them back into another
// with the copy engine (copyengine.Batcher: one kernel launch per batch where the driver loads it),
// and checks the bytes.
func batched(dev *cuda.Device, h *device.Heap, pool *pinned.Pool, s cuda.Stream) error {
	const n, parts = 256 << 10, 4
	b, err := copyengine.New(dev, copyengine.Options{})
	if err != nil {
		return err
	}
	src, err := pool.Alloc(n)
	if err != nil {
		return errors.Join(err, b.Close())
	}
	dst, err := pool.Alloc(n)
	if err != nil {
		return errors.Join(err, pool.Free(src), b.Close())
	}
	for i := range src {
		src[i] = byte(i * 13)
	}
	hs, err := pool.DevicePointer(src)
	hd, err2 := pool.DevicePointer(dst)
	err = errors.Join(err, err2)
	var out, in []copyengine.Job
	var blocks []cuda.DevicePtr
	for i := 0; err == nil && i < parts; i++ {
		var p cuda.DevicePtr
		if p, err = h.Alloc(n/parts, s); err == nil {
			off := cuda.DevicePtr(i * n / parts)
			blocks = append(blocks, p)
			out = append(out, copyengine.Job{Dst: p, Src: hs + off, Len: n / parts})
			in = append(in, copyengine.Job{Dst: hd + off, Src: p, Len: n / parts})
		}
	}
	if err == nil {
		err = errors.Join(b.Copy(out, s), b.Copy(in, s), dev.StreamSynchronize(s))
	}
	if err == nil && !bytes.Equal(src, dst) {
		err = fmt.Errorf("the copy engine (%s) gave back different bytes", b.Method())
	}
	for _, p := range blocks {
		err = errors.Join(err, h.FreeAsync(p, s))
	}
	return errors.Join(err, dev.StreamSynchronize(s), pool.Free(src), pool.Free(dst), b.Close())
}

// providers makes an arena over the device's best device provider, sized by
// DefaultDeviceCapacity, and one over managed memory, which it prefetches and advises.
func providers(dev *cuda.Device) error {
	if _, err := cudamem.DefaultDeviceCapacity(dev); err != nil {
		return err
	}
	prov, err := cudamem.NewDevice(dev)
	if err != nil {
		return err
	}
	a, err := arena.New(arena.Options{Provider: prov, Capacity: 8 << 20})
	if err != nil {
		return err
	}
	span, err := a.Alloc(2<<20, arena.DefaultChunkSize)
	if err != nil {
		return errors.Join(err, a.Close())
	}
	if _, err := a.Bytes(span.Base, 16); !errors.Is(err, arena.ErrNotHostAccessible) {
		err = fmt.Errorf("arena Bytes of device memory = %v, want arena.ErrNotHostAccessible", err)
		return errors.Join(err, a.Free(span), a.Close())
	}
	if err := errors.Join(a.Free(span), a.Close()); err != nil {
		return err
	}

	mp, err := cudamem.NewManaged(dev)
	if err != nil {
		return err
	}
	m, err := arena.New(arena.Options{Provider: mp, Capacity: 4 << 20})
	if err != nil {
		return err
	}
	ms, err := m.Alloc(1<<20, arena.DefaultChunkSize)
	if err != nil {
		return errors.Join(err, m.Close())
	}
	err = errors.Join(
		mp.Advise(ms.Base, ms.Size, cuda.AdviseSetPreferredLocation, dev.Location()),
		mp.Prefetch(ms.Base, ms.Size, cuda.HostLocation(), 0),
		dev.Synchronize())
	if err == nil {
		var b []byte
		if b, err = m.Bytes(ms.Base, ms.Size); err == nil { // managed memory is host-accessible
			b[0] = 1
		}
	}
	return errors.Join(err, m.Free(ms), m.Close())
}
