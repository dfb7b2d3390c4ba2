//go:build !race

package fakecuda

// RaceEnabled: see race_on_test.go.
const RaceEnabled = false
