// Package units formats quantities for people: the Stats.String methods of pinned and device
// and the debug page share it.
package units

import "fmt"

// Bytes formats a byte count with a binary unit (B, KiB, MiB, GiB, TiB, PiB, EiB), three
// significant digits at most.
func Bytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	switch {
	case v >= 100 || v == float64(int64(v)):
		return fmt.Sprintf("%.0f %ciB", v, units[u])
	case v >= 10:
		return fmt.Sprintf("%.1f %ciB", v, units[u])
	}
	return fmt.Sprintf("%.2f %ciB", v, units[u])
}
