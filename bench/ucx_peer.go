package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

// The UCX suite's other process (ucx.go), and the Go net sockets it is compared with.

// netBatch writes the blocks to sock, whose peer reads each into a pool buffer and answers one
// byte, and returns MB/s.
func netBatch(sock net.Conn, src [][]byte) (float64, error) {
	start := time.Now()
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(len(src)))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(src[0])))
	bufs := net.Buffers(append([][]byte{hdr[:]}, src...))
	if _, err := bufs.WriteTo(sock); err != nil {
		return 0, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(sock, ack[:]); err != nil {
		return 0, err
	}
	return float64(len(src)*len(src[0])) / time.Since(start).Seconds() / 1e6, nil
}

// ucxPeer is the other process: a worker and a registered pool, listening, obeying "alloc N
// K", "free", "net" and "quit" on every connection. It also ends when its stdin does (the
// bench's pipe: closed by the bench, or by the kernel when the bench dies), so that a bench
// killed, or one that could not tell it to quit, leaves no peer behind.
func ucxPeer() error {
	w, err := remote.New(remote.Options{Name: "bench-peer", SharedMemory: os.Getenv("PINMALLOC_BENCH_SHM") != ""})
	if err != nil {
		return err
	}
	defer w.Close()
	pool, err := ucxPool(w)
	if err != nil {
		return err
	}
	reg, err := w.Register(pool)
	if err != nil {
		return err
	}
	addr, err := w.Address()
	if err != nil {
		return err
	}
	fmt.Printf("L %x\n", addr)
	ctx := context.Background()
	quit := make(chan struct{})
	var once sync.Once
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		once.Do(func() { close(quit) })
	}()
	go func() {
		for {
			c, err := w.Accept(ctx)
			if err != nil {
				return
			}
			go serveUCXPeer(ctx, c, pool, reg, func() { once.Do(func() { close(quit) }) })
		}
	}()
	<-quit
	return nil
}

// serveUCXPeer obeys one connection's commands.
func serveUCXPeer(ctx context.Context, c *remote.Conn, pool *pinned.Pool, reg *remote.Registration, quit func()) {
	{
		{
			var bufs [][]byte
			for {
				m, err := c.Recv(ctx)
				if err != nil {
					return
				}
				f := strings.Fields(string(m))
				var reply []byte
				switch f[0] {
				case "alloc":
					n, _ := strconv.Atoi(f[1])
					k, _ := strconv.Atoi(f[2])
					for range k {
						buf, err := pool.Alloc(n)
						if err != nil {
							reply = []byte("E " + err.Error())
							break
						}
						bufs = append(bufs, buf)
						d, err := reg.Describe(buf)
						if err != nil {
							reply = []byte("E " + err.Error())
							break
						}
						reply, _ = d.AppendBinary(reply)
					}
				case "free":
					for _, buf := range bufs {
						_ = pool.Free(buf)
					}
					bufs, reply = nil, []byte("ok")
				case "net":
					port, err := netPeer(pool)
					if err != nil {
						reply = []byte("E " + err.Error())
					} else {
						reply = []byte(strconv.Itoa(port))
					}
				case "quit":
					quit()
					return
				}
				if err := c.Send(ctx, reply); err != nil {
					return
				}
			}
		}
	}
}

// netPeer listens on TCP and, for each batch ("count size" then the blocks), reads every block
// into a pool buffer and answers one byte.
func netPeer(pool *pinned.Pool) (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		var bufs [][]byte
		for {
			var hdr [8]byte
			if _, err := io.ReadFull(s, hdr[:]); err != nil {
				return
			}
			n, size := int(binary.LittleEndian.Uint32(hdr[:])), int(binary.LittleEndian.Uint32(hdr[4:]))
			for len(bufs) < n {
				b, err := pool.Alloc(size)
				if err != nil {
					return
				}
				bufs = append(bufs, b)
			}
			for _, b := range bufs[:n] {
				if _, err := io.ReadFull(s, b[:size]); err != nil {
					return
				}
			}
			if _, err := s.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
