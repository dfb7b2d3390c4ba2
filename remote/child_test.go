package remote

// The other process of the two-process tests: the test binary run again with childEnv set to a
// role. It makes a worker and a registered pool, listens, prints "L <listener address> <worker
// address in hex>" on stdout, takes one connection (by its listener or by Dial) and obeys the
// commands the test sends as messages, one reply each:
//
//	alloc N SEED K   K buffers of N bytes, buffer i filled with pattern(SEED+i): the
//	                 descriptors, encoded one after another
//	crc I            "crc <CRC-64 of buffer I>"
//	live             "live <buffers live in the pool>"
//	putloop <descs>  put pattern(7) into the descriptors (the test's buffers) again and again,
//	                 until a transfer fails; answers "started" first
//	tell K           K messages "told <i>", then exits at once, closing nothing
//	quit             "bye", then closes the connection, the registration, the pool and the
//	                 worker, and exits 0 only if every Close succeeded
//
// It exits when its stdin closes (the test died), and reports an error as "E <error>".

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc64"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/pinned"

	ipattern "github.com/pinmalloc/pinmalloc/internal/pattern" // the tests' fill
)

const childEnv = "PINMALLOC_REMOTE_TEST_CHILD"

var crcTab = crc64.MakeTable(crc64.ECMA)

func pattern(seed uint64, i int) byte { return byte(seed*131 + uint64(i)*7 + uint64(i>>9)) }

// fill writes pattern(seed, i) at every byte i of b: one period, 128 KiB (i>>9 wraps at 2^17,
// 7i at 256), doubled by copies.
func fill(b []byte, seed uint64) {
	ipattern.Fill(b, 1<<17, func(i int) byte { return pattern(seed, i) })
}

// testPool returns a pool for the tests: locked memory, or pageable memory where an ordinary
// user's memlock limit is below what the tests use; of src's segments when src is set.
func testPool(src arena.Provider) (*pinned.Pool, error) {
	o := pinned.Options{Capacity: 256 << 20}
	var lim unix.Rlimit
	low := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && os.Geteuid() != 0 && lim.Cur < 64<<20
	if src != nil {
		src.(*segmentSource).opts.Pageable = low
		o.Source = src
	} else if low {
		o.Backend = pinned.Pageable
	}
	return pinned.New(o)
}

func runChild(role string) int {
	w, err := New(Options{Name: "child-" + role, SharedMemory: os.Getenv(shmEnv) != ""})
	if err != nil {
		fmt.Println("E", err)
		return 0 // the test reads the error
	}
	go func() { // the test died: so does the child
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		os.Exit(3)
	}()
	var src arena.Provider
	if os.Getenv(segEnv) != "" {
		src = w.SegmentSource(SegmentOptions{})
	}
	pool, err := testPool(src)
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	reg, err := w.Register(pool)
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	l, err := w.Listen("127.0.0.1:0")
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	defer l.Close()
	addr, err := w.Address()
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	fmt.Printf("L %s %x\n", l.Addr(), addr)
	ctx := context.Background()
	conns := make(chan *Conn, 2)
	go func() {
		if c, err := l.Accept(ctx); err == nil {
			conns <- c
		}
	}()
	go func() {
		if c, err := w.Accept(ctx); err == nil {
			conns <- c
		}
	}()
	c := <-conns
	s := &server{w: w, pool: pool, reg: reg, c: c}
	if err := s.serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	err = errors.Join(reg.Close(), s.freeAll(), pool.Close(), w.Close())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child close:", err)
		return 1
	}
	return 0
}

type server struct {
	w    *Worker
	pool *pinned.Pool
	reg  *Registration
	c    *Conn
	bufs [][]byte
}

func (s *server) freeAll() error {
	var errs []error
	for _, b := range s.bufs {
		errs = append(errs, s.pool.Free(b))
	}
	s.bufs = nil
	return errors.Join(errs...)
}

func (s *server) serve(ctx context.Context) error {
	for {
		m, err := s.c.Recv(ctx)
		if err != nil {
			return err
		}
		cmd, payload, _ := strings.Cut(string(m), "\n")
		f := strings.Fields(cmd)
		reply, quit, err := s.do(ctx, f, []byte(payload))
		if err != nil {
			reply = []byte("E " + err.Error())
		}
		if err := s.c.Send(ctx, reply); err != nil {
			return err
		}
		if quit {
			return s.c.Close()
		}
	}
}

func (s *server) do(ctx context.Context, f []string, payload []byte) (reply []byte, quit bool, err error) {
	num := func(i int) uint64 {
		if i >= len(f) {
			return 0
		}
		v, _ := strconv.ParseUint(f[i], 10, 64)
		return v
	}
	switch f[0] {
	case "alloc":
		n, seed, k := int(num(1)), num(2), int(num(3))
		for i := range k {
			b, err := s.pool.Alloc(n)
			if err != nil {
				return nil, false, err
			}
			fill(b, seed+uint64(i))
			s.bufs = append(s.bufs, b)
			d, err := s.reg.Describe(b)
			if err != nil {
				return nil, false, err
			}
			if reply, err = d.AppendBinary(reply); err != nil {
				return nil, false, err
			}
		}
		return reply, false, nil
	case "crc":
		i := int(num(1))
		if i >= len(s.bufs) {
			return nil, false, fmt.Errorf("no buffer %d", i)
		}
		return fmt.Appendf(nil, "crc %d", crc64.Checksum(s.bufs[i], crcTab)), false, nil
	case "live":
		return fmt.Appendf(nil, "live %d", s.pool.Usage().Live), false, nil
	case "putloop":
		var ds []Descriptor
		for len(payload) > 0 {
			d, rest, err := ParseDescriptor(payload)
			if err != nil {
				return nil, false, err
			}
			ds, payload = append(ds, d), rest
		}
		go s.putLoop(ctx, ds)
		return []byte("started"), false, nil
	case "tell":
		for i := range int(num(1)) {
			if err := s.c.Send(ctx, fmt.Appendf(nil, "told %d", i)); err != nil {
				fmt.Fprintln(os.Stderr, "tell:", err)
				os.Exit(1)
			}
		}
		os.Exit(0) // at once: no Close, no word to the peer
	case "quit":
		return []byte("bye"), true, nil
	}
	return nil, false, fmt.Errorf("unknown command %q", f[0])
}

// putLoop puts pattern(7) into ds until a transfer fails (the test kills this process first).
func (s *server) putLoop(ctx context.Context, ds []Descriptor) {
	src := make([][]byte, len(ds))
	for i, d := range ds {
		b, err := s.pool.Alloc(d.Len())
		if err != nil {
			fmt.Fprintln(os.Stderr, "putloop:", err)
			return
		}
		fill(b, 7)
		src[i] = b
	}
	t := s.c.NewTransfer()
	for {
		for i, d := range ds {
			if err := t.Put(src[i], d); err != nil {
				fmt.Fprintln(os.Stderr, "putloop:", err)
				return
			}
		}
		if err := t.Start(); err != nil {
			return
		}
		if err := t.Wait(ctx); err != nil {
			return
		}
		_ = t.Reset()
		time.Sleep(time.Millisecond)
	}
}
