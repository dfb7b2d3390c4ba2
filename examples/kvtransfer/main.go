// Kvtransfer moves the KV-cache blocks of requests from a prefill process to a decode process
// over UCX, by descriptor, the way disaggregated serving does (vLLM, SGLang, Dynamo). Each
// process registers its pinned pool with a remote.Worker once, so no block is ever registered
// on its own. For each request the decode process allocates the request's blocks in its pool
// and sends their descriptors; the prefill process writes its blocks into them with one
// Transfer (a batch of puts) and says so; the decode process checks every byte and frees the
// blocks. The prefill process prints each request and the rate.
//
//	go run ./examples/kvtransfer              # both processes on this host: decode is a child
//	go run ./examples/kvtransfer -blocks 128 -block 16384 -requests 50
//	go run ./examples/kvtransfer -role decode -listen 0.0.0.0:13337        # on one host...
//	go run ./examples/kvtransfer -role prefill -connect decodehost:13337   # ...and another
//
// UCX picks its transports from the environment: UCX_TLS=tcp UCX_NET_DEVICES=lo for TCP on
// the loopback device; with an RDMA NIC, UCX_NET_DEVICES=mlx5_0:1 (docs/ucx.md). The defaults
// (64 blocks of 64 KiB) run as an ordinary user under the usual 8 MiB memlock limit; beyond
// it, the pools fall back to pageable memory and say so. It needs UCX (Debian: libucx0).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

type config struct {
	blocks, block, requests int
}

// decodeEnv, set to "blocks block requests", makes this program the decode process of -role
// both.
const decodeEnv = "KVTRANSFER_DECODE"

func main() {
	role := flag.String("role", "both", "both (decode runs as a child), prefill or decode")
	listen := flag.String("listen", "127.0.0.1:0", "decode: the address to listen on")
	connect := flag.String("connect", "", "prefill: the decode process's address")
	var c config
	flag.IntVar(&c.blocks, "blocks", 64, "KV blocks per request")
	flag.IntVar(&c.block, "block", 64<<10, "bytes per block (16 KiB - 256 KiB is typical)")
	flag.IntVar(&c.requests, "requests", 20, "requests")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), "usage: kvtransfer [flags]\n\n"+
			"A prefill process sends the KV blocks of each request to a decode process over UCX,\n"+
			"straight from one pinned pool into the other; the decode process checks every byte.\n"+
			"By default both run on this host (decode as a child process). Needs UCX (libucx0).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if v := os.Getenv(decodeEnv); v != "" { // the child of -role both
		if _, err := fmt.Sscan(v, &c.blocks, &c.block, &c.requests); err != nil {
			log.Fatalf("kvtransfer: %s=%q: %v", decodeEnv, v, err)
		}
		*role, *listen = "decode", "127.0.0.1:0"
	}
	if err := checkFlags(c); err != nil {
		fmt.Fprintln(os.Stderr, "kvtransfer:", err)
		os.Exit(2)
	}
	var err error
	switch *role {
	case "decode":
		err = decode(c, *listen, os.Stdout)
	case "prefill":
		err = prefill(c, *connect, os.Stdout)
	case "both":
		err = both(c, os.Stdout)
	default:
		err = fmt.Errorf("unknown -role %q", *role)
	}
	if err != nil {
		log.Fatalf("kvtransfer: %v", err)
	}
}

// pattern is byte i of block b of request r: what prefill writes and decode checks.
func pattern(r, b, i int) byte { return byte(r*31 + b*7 + i + i>>8) }

// newPool returns a pool of locked memory for n bytes of blocks, or of pageable memory where
// the memlock limit cannot hold them, which it says on out as side's ("decode: memlock limit
// below 16 MiB: pageable memory instead").
func newPool(side string, n int, out io.Writer) (*pinned.Pool, error) {
	p, err := pinned.New(pinned.Options{Capacity: max(64<<20, 2*n)})
	if err != nil {
		return nil, err
	}
	b, err := p.Alloc(n) // commit (and lock) what the blocks need, once
	if errors.Is(err, pinned.ErrMemlock) {
		_ = p.Close()
		fmt.Fprintf(out, "%s: memlock limit below %s: pageable memory instead\n", side, amount(int64(n)))
		return pinned.New(pinned.Options{Capacity: max(64<<20, 2*n), Backend: pinned.Pageable})
	}
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, p.Free(b)
}

// side is one process's worker, pool and registration.
type side struct {
	w    *remote.Worker
	pool *pinned.Pool
	reg  *remote.Registration
}

func newSide(c config, name string, out io.Writer) (*side, error) {
	w, err := remote.New(remote.Options{Name: name})
	if err != nil {
		return nil, err
	}
	pool, err := newPool(name, c.blocks*c.block, out)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	reg, err := w.Register(pool)
	if err != nil {
		_ = w.Close()
		_ = pool.Close()
		return nil, err
	}
	return &side{w: w, pool: pool, reg: reg}, nil
}

func (s *side) close() error { return errors.Join(s.reg.Close(), s.w.Close(), s.pool.Close()) }

// decode listens, takes one prefill connection and serves its requests.
func decode(c config, listen string, out io.Writer) (err error) {
	s, err := newSide(c, "decode", out)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }() // Close reports a block left live
	l, err := s.w.Listen(listen)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintf(out, "LISTEN %s\n", l.Addr())
	// The request's blocks, freed on the way out after the connection's Close (no put of the
	// peer's lands in them then), so that a peer gone mid-request is the error, alone.
	blocks := make([][]byte, c.blocks)
	defer func() {
		for _, b := range blocks {
			if b != nil {
				err = errors.Join(err, s.pool.Free(b))
			}
		}
	}()
	ctx := context.Background()
	conn, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for r := range c.requests {
		var descs []byte
		for i := range blocks {
			if blocks[i], err = s.pool.Alloc(c.block); err != nil {
				return err
			}
			d, err := s.reg.Describe(blocks[i])
			if err != nil {
				return err
			}
			descs, _ = d.AppendBinary(descs)
		}
		if err := conn.Send(ctx, descs); err != nil {
			return err
		}
		if m, err := conn.Recv(ctx); err != nil {
			return fmt.Errorf("request %d: %w", r, err)
		} else if string(m) != fmt.Sprint("done ", r) {
			return fmt.Errorf("request %d: prefill said %q, want %q", r, m, fmt.Sprint("done ", r))
		}
		bad := 0
		for i, b := range blocks {
			for j := range b {
				if b[j] != pattern(r, i, j) {
					bad++
				}
			}
			blocks[i] = nil
			if err := s.pool.Free(b); err != nil {
				return err
			}
		}
		reply := fmt.Sprint("ok ", r)
		if bad > 0 {
			reply = fmt.Sprintf("bad %d: %d bytes differ", r, bad)
		}
		if err := conn.Send(ctx, []byte(reply)); err != nil {
			return err
		}
	}
	return nil
}

// prefill connects to decode and sends its requests' blocks.
func prefill(c config, addr string, out io.Writer) error {
	if addr == "" {
		return errors.New("-role prefill needs -connect host:port")
	}
	s, err := newSide(c, "prefill", out)
	if err != nil {
		return err
	}
	return s.prefill(c, addr, out)
}

// prefill connects s to decode and sends its requests' blocks, then closes s.
func (s *side) prefill(c config, addr string, out io.Writer) (err error) {
	defer func() { err = errors.Join(err, s.close()) }() // after the blocks' Frees: Close reports a block left live
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := s.w.Connect(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	blocks := make([][]byte, 0, c.blocks)
	defer func() { // a Free while a transfer holds the block takes effect when the transfer ends
		for _, b := range blocks {
			err = errors.Join(err, s.pool.Free(b))
		}
	}()
	for range c.blocks {
		b, err := s.pool.Alloc(c.block)
		if err != nil {
			return err
		}
		blocks = append(blocks, b)
	}
	t := conn.NewTransfer()
	// On an error before Start, Reset gives back the holds Put took (a transfer still in
	// flight, ErrBusy here, is waited for by the connection's Close); the blocks are then freed.
	defer func() {
		if rerr := t.Reset(); rerr != nil && !errors.Is(rerr, remote.ErrBusy) {
			err = errors.Join(err, rerr)
		}
	}()
	var busy time.Duration
	for r := range c.requests {
		for i, b := range blocks { // the request's KV blocks, as a prefill would have computed them
			for j := range b {
				b[j] = pattern(r, i, j)
			}
		}
		m, err := conn.Recv(ctx)
		if err != nil {
			return err
		}
		for i := 0; len(m) > 0; i++ {
			d, rest, err := remote.ParseDescriptor(m)
			if err != nil {
				return err
			}
			if i >= len(blocks) {
				return errors.New("decode sent more descriptors than blocks")
			}
			if err := t.Put(blocks[i], d); err != nil {
				return err
			}
			m = rest
		}
		start := time.Now()
		if err := t.Start(); err != nil {
			return err
		}
		if err := t.Wait(ctx); err != nil {
			return err
		}
		took := time.Since(start)
		busy += took
		if err := t.Reset(); err != nil {
			return err
		}
		if err := conn.Send(ctx, []byte(fmt.Sprint("done ", r))); err != nil {
			return err
		}
		if m, err := conn.Recv(ctx); err != nil || string(m) != fmt.Sprint("ok ", r) {
			return fmt.Errorf("decode on request %d: %q, %v", r, m, err)
		}
		fmt.Fprintf(out, "request %2d: %d blocks of %s in %v, checked by decode\n", r, c.blocks, amount(int64(c.block)), took.Round(time.Microsecond))
	}
	total := int64(c.requests) * int64(c.blocks) * int64(c.block)
	st := s.w.Stats()
	fmt.Fprintf(out, "kvtransfer: %d requests x %d blocks x %s = %s in %v of transfers: %s/s, every byte checked\n",
		c.requests, c.blocks, amount(int64(c.block)), amount(total), busy.Round(time.Millisecond), amount(int64(float64(total)/busy.Seconds())))
	fmt.Fprintf(out, "UCX registrations: %d for %d blocks sent (the pool's %s, registered once, not each block)\n",
		st.Registrations, c.requests*c.blocks, plural(st.Regions, "region"))
	return nil
}

// plural says n things: "1 region", "2 regions".
func plural(n uint64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// both runs decode as a child process and prefill here.
func both(c config, out io.Writer) error {
	// Prefill's side first: where it cannot be made (no UCX, say), decode could not either, and
	// the reason is said once, without starting the child.
	s, err := newSide(c, "prefill", out)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return errors.Join(err, s.close())
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d", decodeEnv, c.blocks, c.block, c.requests))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return errors.Join(err, s.close())
	}
	if err := cmd.Start(); err != nil {
		return errors.Join(err, s.close())
	}
	rd := bufio.NewReader(stdout)
	var addr string
	for addr == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			_ = cmd.Process.Kill()
			werr := cmd.Wait()
			if errors.Is(err, io.EOF) { // it ended: its own error is on stderr, above
				err = errors.New("ended before it listened")
			}
			return errors.Join(fmt.Errorf("decode process: %w (%v)", err, werr), s.close())
		}
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "LISTEN "); ok {
			addr = a
		} else {
			fmt.Fprint(out, line) // what decode says is labelled "decode: "
		}
	}
	go func() { _, _ = io.Copy(out, rd) }()
	if err := s.prefill(c, addr, out); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	return cmd.Wait()
}
