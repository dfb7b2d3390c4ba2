// Package probe shakes the schedule of the module's tests, to find the tests that pass only
// because the goroutines they race happened to run late. Build the tests with the tag
// pinmalloc_probe:
//
//	go test -tags pinmalloc_probe -count=1 ./pinned ./device ./uvm ./copyengine
//
// Two things change in that build. The library's default purge delay
// (arena.DefaultPurgeDelay, the delay of pinned pools and device heaps whose Options leave
// PurgeDelay zero) drops from 10 ms to 1 µs, so the idle purgers run whenever they may; a
// test that sets PurgeDelay keeps its value. And Pause, which the tests' shared helpers (must,
// the step helpers of model tests) call, sleeps now and then (pause.go), so the steps of a
// test are spread over many purger ticks and scheduler decisions, as on a loaded machine. A
// test that fails in that build assumed a purge or a goroutine would not run within some
// window: a bug in the test, or in the library when the library assumed it.
//
// Without the tag Enabled is false and Pause does nothing; the package is imported by tests
// only, so the library's code is the same in both builds but for that one constant.
package probe
