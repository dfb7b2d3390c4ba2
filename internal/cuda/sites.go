package cuda

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Where each live resource of a Device was made, so that a test's leak check can name the call
// that made what was never closed instead of printing counters. Off by default (a Device pays
// one atomic load per create and release); RecordSites turns it on for the process.

// siteBook maps each live resource (its counter and handle) to the stack that made it.
type siteBook struct {
	mu   sync.Mutex
	live map[siteKey][]uintptr
}

var (
	sitesOn atomic.Bool // RecordSites was called
	// recorded are the Devices whose sites are recorded: the one RecordSites was given and
	// every one opened since, until closed with nothing live.
	recorded struct {
		sync.Mutex
		devs map[*Device]bool
	}
)

// noteOpen adds a Device opened while sites are recorded; noteClose drops it.
func noteOpen(d *Device) {
	if !sitesOn.Load() {
		return
	}
	recorded.Lock()
	defer recorded.Unlock()
	if recorded.devs == nil {
		recorded.devs = map[*Device]bool{}
	}
	recorded.devs[d] = true
}

func noteClose(d *Device) {
	if !sitesOn.Load() || d.Stats().Live() != 0 { // what it leaked stays to be reported
		return
	}
	recorded.Lock()
	defer recorded.Unlock()
	delete(recorded.devs, d)
}

type siteKey struct {
	counter *atomic.Int64
	h       uint64
}

// RecordSites makes d, and every Device opened from now on in this process (a pool's, a
// heap's own), remember the call stack that made each resource, for LiveSites and
// AllLiveSites.
func RecordSites(d *Device) {
	sitesOn.Store(true)
	noteOpen(d)
}

// AllLiveSites is LiveSites over every Device whose sites are recorded.
func AllLiveSites() (sites []Site, unnamed int64) {
	recorded.Lock()
	devs := make([]*Device, 0, len(recorded.devs))
	for d := range recorded.devs {
		devs = append(devs, d)
	}
	recorded.Unlock()
	for _, d := range devs {
		s, n := d.LiveSites()
		sites, unnamed = append(sites, s...), unnamed+n
	}
	sort.Slice(sites, func(i, j int) bool { return sites[i].At < sites[j].At })
	return sites, unnamed
}

// track adds delta to counter when err is nil, notes or forgets where resource h was made when
// sites are recorded, and returns err.
func (d *Device) track(counter *atomic.Int64, h uint64, delta int64, err error) error {
	if err != nil {
		return err
	}
	counter.Add(delta)
	if !sitesOn.Load() {
		return nil
	}
	k := siteKey{counter, h}
	var pcs []uintptr
	if delta > 0 {
		pcs = make([]uintptr, 32)
		pcs = pcs[:runtime.Callers(3, pcs)]
	}
	d.sites.mu.Lock()
	defer d.sites.mu.Unlock()
	if delta < 0 {
		delete(d.sites.live, k)
		return nil
	}
	if d.sites.live == nil {
		d.sites.live = map[siteKey][]uintptr{}
	}
	d.sites.live[k] = pcs
	return nil
}

// Site is where live resources were made: the library call (Call, "device.New") that the
// program's code at At ("upload_test.go:23") made, and what it holds (Holds: "1 stream, 2
// VMM reservations").
type Site struct {
	Call, At, Holds string
}

func (s Site) String() string { return s.Call + " at " + s.At + " (" + s.Holds + ")" }

// module is the import path prefix of this library's packages.
const module = "github.com/pinmalloc/pinmalloc/"

// LiveSites returns where the resources still live were made, one Site per call site, in the
// order of At, and how many live resources were made before RecordSites (not named).
func (d *Device) LiveSites() (sites []Site, unnamed int64) {
	kinds := []struct {
		c    *atomic.Int64
		name string
	}{
		{&d.deviceAllocs, "device allocation"}, {&d.managedAllocs, "managed allocation"},
		{&d.hostAllocs, "pinned host allocation"}, {&d.hostRegs, "host registration"},
		{&d.reservations, "VMM reservation"}, {&d.handles, "VMM physical allocation"},
		{&d.streams, "stream"}, {&d.events, "event"}, {&d.modules, "module"}, {&d.pools, "memory pool"},
	}
	type at struct{ call, at string }
	counts := map[at]map[string]int{}
	d.sites.mu.Lock()
	named := int64(0)
	for k, pcs := range d.sites.live {
		name := "resource"
		for _, kd := range kinds {
			if kd.c == k.counter {
				name = kd.name
			}
		}
		call, where := callSite(pcs)
		a := at{call, where}
		if counts[a] == nil {
			counts[a] = map[string]int{}
		}
		counts[a][name]++
		named++
	}
	d.sites.mu.Unlock()
	for a, c := range counts {
		var holds []string
		for _, kd := range kinds {
			if n := c[kd.name]; n > 0 {
				holds = append(holds, plural(n, kd.name))
			}
		}
		sites = append(sites, Site{Call: a.call, At: a.at, Holds: strings.Join(holds, ", ")})
	}
	sort.Slice(sites, func(i, j int) bool { return sites[i].At < sites[j].At })
	return sites, d.Stats().Live() - named
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// callSite finds, in a stack that made a resource, the program's frame (the first outside this
// library, or in a _test.go file) and the library function it called.
func callSite(pcs []uintptr) (call, at string) {
	frames := runtime.CallersFrames(pcs)
	call = "?"
	for {
		f, more := frames.Next()
		ours := strings.HasPrefix(f.Function, module) && !strings.HasSuffix(f.File, "_test.go")
		if !ours && !strings.HasPrefix(f.Function, "runtime.") {
			return call, filepath.Base(filepath.Dir(f.File)) + "/" + filepath.Base(f.File) + fmt.Sprint(":", f.Line)
		}
		if ours {
			call = strings.NewReplacer("(*", "", ")", "").Replace(strings.TrimPrefix(f.Function, module))
			call = strings.TrimPrefix(call, "internal/")
		}
		if !more {
			return call, "an unknown place"
		}
	}
}
