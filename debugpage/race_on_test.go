//go:build race

package debugpage

const raceEnabled = true
