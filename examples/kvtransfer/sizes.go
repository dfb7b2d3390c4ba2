package main

import "fmt"

// amount says n bytes as a reader takes them in: whole MiB (16 MiB), else MiB, KiB or bytes
// with at most one decimal (9.5 MiB, 1.5 KiB, 64 B), so that a small block is not "0 KiB".
func amount(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
