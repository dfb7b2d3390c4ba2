package main

import "fmt"

// size says a block's n bytes exactly, in the largest unit that divides them: "64 KiB",
// "2 MiB", "1600 B", so that a block under a KiB is not "0 KiB".
func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
