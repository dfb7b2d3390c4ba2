//go:build race

package pinned

const raceEnabled = true
