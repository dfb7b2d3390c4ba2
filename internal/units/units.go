// Package units formats quantities for people: the Stats.String methods of pinned and device
// and the debug page share it.
package units

import (
	"fmt"
	"math"
)

// Bytes formats a byte count below 1 KiB exactly ("1023 B"), and a larger one with a binary
// unit (KiB, MiB, GiB, TiB, PiB, EiB) rounded to three significant digits: "1.50 KiB", "11.8
// MiB", "150 GiB", a whole number without decimals ("10 KiB"), and 1000 to 1023 of a unit
// with all four. A value that rounds up to 1024 of a unit is written in the next.
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
	decimals := 2
	switch {
	case v >= 100 || v == math.Trunc(v):
		decimals = 0
	case v >= 10:
		decimals = 1
	}
	// Round as the format will, and take the shorter form or the next unit where that
	// reaches the next decade or 1024.
	scale := math.Pow(10, float64(decimals))
	if r := math.Round(v*scale) / scale; r >= 1024 && u < len(units)-1 {
		v, u, decimals = r/1024, u+1, 2
	} else if r >= 100 {
		decimals = 0
	} else if r >= 10 {
		decimals = min(decimals, 1)
	}
	return fmt.Sprintf("%.*f %ciB", decimals, v, units[u])
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
