//go:build !race

package uvm_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
