// Package invariants turns on the module's expensive self-checks, in the manner of pebble's
// internal/invariants: code guards a check with
//
//	if invariants.Enabled { if err := x.verify(); err != nil { panic(err) } }
//
// and the compiler drops the check from ordinary builds. Enabled is true in builds with the
// tag invariants (go test -tags invariants ./...) and under the race detector (-race), so
// every race run also walks the bookkeeping. A check that walks a whole structure after every
// step guards itself with Due instead, which runs it at every step with the tag and at one
// step in RaceEvery under -race alone (due.go), so that the race run of the tree stays quick.
package invariants
