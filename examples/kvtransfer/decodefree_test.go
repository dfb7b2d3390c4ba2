package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/remote"
)

// TestDecodeFreesOnPeerFailure: a decode process whose prefill goes away in the middle of a
// request says so, and only so: the request's blocks are freed on the way out. They stayed
// live, and the pool's Close added "pinned: buffers still live: 4 buffers" to the error, as if
// the example leaked them.
func TestDecodeFreesOnPeerFailure(t *testing.T) {
	w, err := remote.New(remote.Options{Name: "test-prefill"})
	if errors.Is(err, remote.ErrNoUCX) {
		if os.Getenv("PINMALLOC_REQUIRE_UCX") != "" {
			t.Fatal(err)
		}
		t.Skipf("no UCX: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := decode(config{blocks: 4, block: 4096, requests: 2}, "127.0.0.1:0", pw)
		pw.Close()
		done <- err
	}()
	rd := bufio.NewReader(pr)
	var addr string
	for addr == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("decode ended before it listened: %v", <-done)
		}
		addr, _ = strings.CutPrefix(strings.TrimSpace(line), "LISTEN ")
	}
	go func() { _, _ = io.Copy(io.Discard, rd) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := w.Connect(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Recv(ctx); err != nil { // the first request's descriptors: its blocks are allocated
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil { // gone, mid-request
		t.Fatal(err)
	}
	err = <-done
	if err == nil {
		t.Fatal("decode: no error after its peer went away")
	}
	if strings.Contains(err.Error(), "still live") || !errors.Is(err, remote.ErrClosed) {
		t.Errorf("decode: %v\nwant remote.ErrClosed alone: the request's blocks freed", err)
	}
}
