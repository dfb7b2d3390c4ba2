package pinned

import (
	"fmt"
	"github.com/pinmalloc/pinmalloc/internal/units"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
)

// Allocation sites, for leak hunting (Options.RecordSites). With the option on, Alloc takes
// its guarded path: it records the time and up to siteDepth return addresses of its caller
// (runtime.Callers) in a table keyed by the buffer's address, and Free removes the entry.
// Blocks reports each buffer's age and site, and Close, when buffers are still live, names the
// sites holding the most bytes in its error. With the option off nothing is recorded and the
// fast paths are unchanged (the option folds into the one guarded test they already make).
//
// The table is split in siteShards maps, each under its own mutex, by address. A Free removes
// its entry under that mutex while the heap takes the buffer back, so a racing Alloc handed the
// same memory cannot have its new entry removed by the old buffer's Free.

const (
	siteDepth  = 8
	siteShards = 16
	// topSites is how many sites Close names.
	topSites = 3
)

// siteRecord is what is known of a live buffer's allocation.
type siteRecord struct {
	when time.Time
	size uintptr
	n    int
	pcs  [siteDepth]uintptr
}

// frames resolves the return addresses into "function (file:line)", innermost first.
func (r *siteRecord) frames() []string {
	var out []string
	fs := runtime.CallersFrames(r.pcs[:r.n])
	for {
		f, more := fs.Next()
		if f.Function != "" {
			out = append(out, fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line))
		}
		if !more {
			return out
		}
	}
}

type siteShard struct {
	mu sync.Mutex
	m  map[uintptr]siteRecord
	_  [40]byte // keeps neighbouring shards' mutexes off one cache line
}

type siteTable struct{ shards [siteShards]siteShard }

func newSiteTable() *siteTable {
	t := &siteTable{}
	for i := range t.shards {
		t.shards[i].m = map[uintptr]siteRecord{}
	}
	return t
}

func (t *siteTable) shard(addr uintptr) *siteShard {
	return &t.shards[(addr>>6^addr>>16)%siteShards]
}

// record notes the caller of the Pool method that called the method calling record (skip
// counts the frames between; see Alloc's guarded path).
func (t *siteTable) record(addr, size uintptr, skip int) {
	r := siteRecord{when: time.Now(), size: size}
	r.n = runtime.Callers(skip, r.pcs[:])
	s := t.shard(addr)
	s.mu.Lock()
	s.m[addr] = r
	s.mu.Unlock()
}

func (t *siteTable) get(addr uintptr) (siteRecord, bool) {
	s := t.shard(addr)
	s.mu.Lock()
	r, ok := s.m[addr]
	s.mu.Unlock()
	return r, ok
}

// top returns a sentence naming the k sites holding the most live bytes, or "" when nothing
// is recorded.
func (t *siteTable) top(k int) string {
	type site struct {
		key   string
		rec   siteRecord
		n     int
		bytes uintptr
	}
	by := map[string]*site{}
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for _, r := range s.m {
			key := fmt.Sprint(r.pcs[:r.n])
			st := by[key]
			if st == nil {
				st = &site{key: key, rec: r}
				by[key] = st
			}
			st.n++
			st.bytes += r.size
		}
		s.mu.Unlock()
	}
	if len(by) == 0 {
		return ""
	}
	sites := make([]*site, 0, len(by))
	for _, s := range by {
		sites = append(sites, s)
	}
	sort.Slice(sites, func(i, j int) bool {
		if sites[i].bytes != sites[j].bytes {
			return sites[i].bytes > sites[j].bytes
		}
		return sites[i].key < sites[j].key
	})
	var b strings.Builder
	b.WriteString("top allocation sites:")
	for i, s := range sites[:min(k, len(sites))] {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s (%d bytes) at %s", units.Count(uint64(s.n), "buffer"), s.bytes, strings.Join(s.rec.frames(), " ← "))
	}
	if len(sites) > k {
		fmt.Fprintf(&b, "; and %d more sites", len(sites)-k)
	}
	return b.String()
}
