// Sharedkv is a key-value store in pinned memory shared by processes (package ipcpool): an
// owner process serves the pool, a keeper process holds it locked, and four worker processes
// write values into buffers of their own and read each other's by handle, while this
// program, the coordinator, keeps the index (key -> version, handle). Along the way it:
//
//   - has three workers retain a value the fourth wrote (a shared prefix);
//   - kills that worker with SIGKILL: its values go (their handles are refused as stale,
//     never read as another's bytes), the prefix the others retain lives on;
//   - kills the owner with SIGKILL and starts a new one, which adopts the pool from the
//     keeper and the workers (no page faulted or pinned again): every handle still reads;
//   - has a worker free all its values and shows its memory going back to the pool, where
//     another worker takes it;
//   - reads an old version's handle, which is refused;
//
// and prints what happened. Every process is this program again, in another role.
//
//	go run ./examples/sharedkv          # 8 MiB pool, 4 KiB values, 400 operations
//	go run ./examples/sharedkv -ops 2000
//
// The sizes are small so that it runs as an ordinary user with the usual 8 MiB memlock limit
// (ulimit -l 8192): the owner and the keeper lock the 8 MiB pool, each worker the pages it
// touches.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"syscall"
)

// Roles: this program, started again with one of these set to the pool's socket.
const (
	ownerEnv  = "SHAREDKV_OWNER" // serve the pool (with SHAREDKV_ADOPT set: adopt it)
	adoptEnv  = "SHAREDKV_ADOPT"
	keeperEnv = "SHAREDKV_KEEPER" // hold the pool across the owner's restart
	workerEnv = "SHAREDKV_WORKER" // attach, and obey the coordinator
)

func main() {
	ops := flag.Int("ops", 400, "operations before and after the restart")
	valueSize := flag.Int("value", 4096, "value size in bytes, 2048 to 65536")
	keys := flag.Int("keys", 32, "distinct keys (their values together at most 2 MiB)")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), `usage: sharedkv [flags]

A key-value store in pinned memory shared by six processes (package ipcpool): an owner
serving an 8 MiB pool, a keeper holding it locked, and four workers that write values into
buffers of their own and read each other's by handle; this process keeps the index. It kills
a worker and the owner with SIGKILL on the way, restarts the owner (which adopts the pool as
it is), shows a worker's memory going back to the pool and a stale handle refused, and
prints what happened. It runs as an ordinary user under an 8 MiB memlock limit.

`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if role := runRole(); role >= 0 {
		os.Exit(role)
	}
	if err := checkFlags(*valueSize, *ops, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "sharedkv:", err)
		os.Exit(2)
	}
	interrupted := stopOnInterrupt()
	err := run(os.Stdout, *valueSize, *ops, *keys, *seed)
	if sig := interrupted(); sig != nil {
		fmt.Fprintf(os.Stderr, "sharedkv: interrupted (%v): the other processes are stopped "+
			"and the socket removed\n", sig)
		os.Exit(128 + int(sig.(syscall.Signal)))
	}
	if err != nil {
		log.Fatal(err)
	}
}

// runRole runs the role this process was started in, and returns its exit code, or -1 for
// the coordinator.
func runRole() int {
	var err error
	switch {
	case os.Getenv(ownerEnv) != "":
		err = runOwner(os.Getenv(ownerEnv), os.Getenv(adoptEnv) != "")
	case os.Getenv(keeperEnv) != "":
		err = runKeeper(os.Getenv(keeperEnv))
	case os.Getenv(workerEnv) != "":
		err = runWorker(os.Getenv(workerEnv))
	default:
		return -1
	}
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	return 0
}
