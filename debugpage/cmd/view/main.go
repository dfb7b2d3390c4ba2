// Command view serves a snapshot of pinmalloc's debug page, saved from its stats.json (the
// page's "download a snapshot" link), as the page was when it was taken: the timelines, maps,
// sites, buffers and figures, read offline, on another machine, after the process is gone.
//
//	go run github.com/pinmalloc/pinmalloc/debugpage/cmd/view snapshot.json
//	go run ./debugpage/cmd/view -addr 127.0.0.1:8080 snapshot.json
//
// It prints the page's address and serves until interrupted.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/pinmalloc/pinmalloc/debugpage"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		log.Fatal(err)
	}
}

// run serves the snapshot the arguments name and prints its address to out; started, when
// set, is called with the server once it listens (the tests stop it with Close).
func run(args []string, out io.Writer, started func(*http.Server)) error {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:6061", "address to serve the page on")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: view [-addr host:port] snapshot.json\n\n"+
			"Serves a snapshot of pinmalloc's debug page (saved from its stats.json) as the page was\n"+
			"when it was taken.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want one snapshot file")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	h, err := debugpage.Snapshot(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "serving %s at http://%s/\n", fs.Arg(0), l.Addr())
	if started != nil {
		started(srv)
	}
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
