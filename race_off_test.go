//go:build !race

package pinmalloc_test

const raceEnabled = false
