package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// removeOnInterrupt removes the temporary file at path when SIGINT or SIGTERM comes before the
// returned stop is called, says so and exits as the signal would have (128 + its number), so
// that Ctrl-C leaves no file of -size bytes behind.
func removeOnInterrupt(path string) (stop func()) {
	c := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-c:
			_ = os.Remove(path)
			fmt.Fprintf(os.Stderr, "loadweights: interrupted (%v): removed the temporary file %s\n",
				sig, path)
			os.Exit(128 + int(sig.(syscall.Signal)))
		case <-done:
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
	}
}
