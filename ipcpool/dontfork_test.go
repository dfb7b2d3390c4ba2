package ipcpool

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// The pool's mappings (its regions and the control region), in the owner and in an attached
// process, are not passed to a child forked without exec (MADV_DONTFORK: VmFlags "dc"): the
// owner does not watch that child, and would lend the memory again while the child uses it;
// and a fork would make the pinned pages copy-on-write in the parent. (They were passed.)
func TestMappingsNotForked(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	for _, c := range []struct {
		who string
		sp  *space
	}{{"owner", w.sp}, {"process", p.sp}} {
		checkDontFork(t, c.who+"'s pool", c.sp.base, c.sp.poolBytes())
		checkDontFork(t, c.who+"'s control region", c.sp.ctlBase, c.sp.ctlSize)
	}
}

// TestFakeVMMMappingsNotForked is TestMappingsNotForked for a VMM pool's mappings.
func TestFakeVMMMappingsNotForked(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 8 << 20, VMM: true, Pool: cudaHost})
	must(t, "Serve", err)
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	for _, c := range []struct {
		who string
		sp  *space
	}{{"owner", w.sp}, {"process", p.sp}} {
		checkDontFork(t, c.who+"'s pool", c.sp.base, c.sp.poolBytes())
		checkDontFork(t, c.who+"'s control region", c.sp.ctlBase, c.sp.ctlSize)
	}
	must(t, "Close", p.Close())
	must(t, "owner Close", w.Close())
}

// checkDontFork fails t unless every mapping of [base, base+size) in this process is marked
// MADV_DONTFORK, and the mappings cover the range.
func checkDontFork(t *testing.T, what string, base, size uintptr) {
	t.Helper()
	vmas, err := smaps()
	must(t, "reading /proc/self/smaps", err)
	covered := base
	for _, v := range vmas {
		if v.end <= base || v.start >= base+size {
			continue
		}
		if !slices.Contains(v.flags, "dc") {
			t.Errorf("%s: the mapping %#x-%#x is passed to a forked child (VmFlags %s)",
				what, v.start, v.end, strings.Join(v.flags, " "))
		}
		if v.start <= covered {
			covered = max(covered, v.end)
		}
	}
	if covered < base+size {
		t.Errorf("%s: [%#x, %#x) is not all mapped", what, base, base+size)
	}
}

// vma is one mapping of /proc/self/smaps.
type vma struct {
	start, end uintptr
	flags      []string
}

// smaps returns this process's mappings, in address order, with their VmFlags.
func smaps() ([]vma, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var vmas []vma
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok && len(vmas) > 0 {
			vmas[len(vmas)-1].flags = strings.Fields(flags)
			continue
		}
		lo, rest, ok := strings.Cut(line, "-")
		if !ok || strings.Contains(lo, ":") || strings.Contains(lo, " ") {
			continue
		}
		hi, _, _ := strings.Cut(rest, " ")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("a mapping line %q", line)
		}
		vmas = append(vmas, vma{start: uintptr(a), end: uintptr(b)})
	}
	return vmas, sc.Err()
}

// The junk mapped over the pool's range by a Close that gave live buffers up is not passed to
// a child forked without exec either (MADV_DONTFORK, as the pool's mappings were): the range
// looks the same in such a child whatever the Close left there. (The junk was passed: private
// scratch, copied on write into the child.)
func TestJunkNotForked(t *testing.T) {
	_, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	base, size := p.sp.base, p.sp.poolBytes()
	if err := p.Close(); err == nil {
		t.Fatal("Close with a live buffer reports nothing")
	}
	b[0]++ // junk: writable
	checkDontFork(t, "the junk over the pool", base, size)
}
