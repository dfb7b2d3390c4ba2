// Keeper holds the memory of an ipcpool pool across its owner's restarts: it attaches to the
// pool served at -path, maps all of it locked, and keeps the pool's descriptors, so that
// when the owner dies the memory stays locked and the next owner (started with
// ipcpool.Options.Adopt) takes it over as it is, with no page faulted or pinned again, its
// processes and handles as they were. Its memlock limit must hold the whole pool
// (ulimit -l, LimitMEMLOCK, or CAP_IPC_LOCK).
//
//	keeper -path /run/kv/pool.sock
//
// It runs until SIGINT or SIGTERM, and logs each owner it hands the pool to.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pinmalloc/pinmalloc/ipcpool"
)

func main() {
	path := flag.String("path", "", "the pool's socket (required)")
	timeout := flag.Duration("timeout", 10*time.Second, "how long to wait for the owner when attaching")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: keeper -path SOCKET\n\n"+
			"Holds an ipcpool pool's memory, locked, across its owner's restarts: the next owner,\n"+
			"started with Options.Adopt, takes it over with no page faulted or pinned again.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *path == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *path, *timeout, os.Stderr); err != nil {
		log.Fatal(err)
	}
}

// run keeps the pool at path until ctx is done, reporting to out.
func run(ctx context.Context, path string, timeout time.Duration, out io.Writer) error {
	actx, cancel := context.WithTimeout(ctx, timeout)
	k, err := ipcpool.Keep(actx, path, ipcpool.AttachOptions{Timeout: timeout})
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "keeper: holding pool %016x at %s\n", k.ID(), path)
	seen := 0
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return k.Close()
		case <-t.C:
			if n := k.Rejoined(); n != seen {
				seen = n
				fmt.Fprintf(out, "keeper: handed the pool to a new owner (%d so far)\n", n)
			}
		}
	}
}
