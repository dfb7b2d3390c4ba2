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

// Count formats n things named by one, the singular: "1 page", "3 pages", "0 pages". The plural
// adds an s, unless given ("miss", "misses").
func Count(n uint64, one string, plural ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(plural) > 0 {
		return fmt.Sprintf("%d %s", n, plural[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}
