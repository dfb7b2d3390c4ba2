//go:build cgo && linux

package ucx

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/pinmalloc/pinmalloc"
)

// symID names an entry point in symbols.
type symID int

const (
	symGetVersion symID = iota
	symStatusString
	symConfigRead
	symConfigRelease
	symInitVersion
	symCleanup
	symContextQuery
	symWorkerCreate
	symWorkerDestroy
	symWorkerGetAddress
	symWorkerReleaseAddress
	symWorkerGetEfd
	symWorkerArm
	symWorkerSignal
	symWorkerProgress
	symSetAmRecvHandler
	symAmSendNbx
	symListenerCreate
	symListenerDestroy
	symListenerQuery
	symListenerReject
	symConnRequestQuery
	symEpCreate
	symEpCloseNbx
	symEpFlushNbx
	symMemMap
	symMemUnmap
	symMemQuery
	symRkeyPtr
	symRkeyPack
	symRkeyBufferRelease
	symEpRkeyUnpack
	symRkeyDestroy
	symPutNbx
	symGetNbx
	symRequestFree
	symEpPrintInfo
	symAmDataRelease
	symAmRecvDataNbx
	symDtCreateGeneric
	numSyms
)

// symbols are the entry points' names. ucs_status_string is libucs's, found through libucp's
// dependencies.
var symbols = [numSyms]string{
	symGetVersion:           "ucp_get_version",
	symStatusString:         "ucs_status_string",
	symConfigRead:           "ucp_config_read",
	symConfigRelease:        "ucp_config_release",
	symInitVersion:          "ucp_init_version",
	symCleanup:              "ucp_cleanup",
	symContextQuery:         "ucp_context_query",
	symWorkerCreate:         "ucp_worker_create",
	symWorkerDestroy:        "ucp_worker_destroy",
	symWorkerGetAddress:     "ucp_worker_get_address",
	symWorkerReleaseAddress: "ucp_worker_release_address",
	symWorkerGetEfd:         "ucp_worker_get_efd",
	symWorkerArm:            "ucp_worker_arm",
	symWorkerSignal:         "ucp_worker_signal",
	symWorkerProgress:       "ucp_worker_progress",
	symSetAmRecvHandler:     "ucp_worker_set_am_recv_handler",
	symAmSendNbx:            "ucp_am_send_nbx",
	symListenerCreate:       "ucp_listener_create",
	symListenerDestroy:      "ucp_listener_destroy",
	symListenerQuery:        "ucp_listener_query",
	symListenerReject:       "ucp_listener_reject",
	symConnRequestQuery:     "ucp_conn_request_query",
	symEpCreate:             "ucp_ep_create",
	symEpCloseNbx:           "ucp_ep_close_nbx",
	symEpFlushNbx:           "ucp_ep_flush_nbx",
	symMemMap:               "ucp_mem_map",
	symMemUnmap:             "ucp_mem_unmap",
	symMemQuery:             "ucp_mem_query",
	symRkeyPtr:              "ucp_rkey_ptr",
	symRkeyPack:             "ucp_rkey_pack",
	symRkeyBufferRelease:    "ucp_rkey_buffer_release",
	symEpRkeyUnpack:         "ucp_ep_rkey_unpack",
	symRkeyDestroy:          "ucp_rkey_destroy",
	symPutNbx:               "ucp_put_nbx",
	symGetNbx:               "ucp_get_nbx",
	symRequestFree:          "ucp_request_free",
	symEpPrintInfo:          "ucp_ep_print_info",
	symAmDataRelease:        "ucp_am_data_release",
	symAmRecvDataNbx:        "ucp_am_recv_data_nbx",
	symDtCreateGeneric:      "ucp_dt_create_generic",
}

// lib is the opened library and its lazily resolved entry points.
type lib struct {
	path   string
	handle C.uintptr_t
	syms   [numSyms]struct {
		once sync.Once
		fn   C.uintptr_t
		err  error
	}
	copyOnce sync.Once
	copyDT   C.uint64_t // the datatype of sends by copy (copyDatatype)
	copyErr  error
}

// copyDatatype returns the datatype of sends by copy (shim_calls.c's copy_ops), made once.
func (l *lib) copyDatatype() (C.uint64_t, error) {
	l.copyOnce.Do(func() {
		f, err := l.fn(symDtCreateGeneric)
		if err == nil {
			err = check(C.pm_copy_dt_create(f, &l.copyDT))
		}
		if err != nil {
			l.copyErr = fmt.Errorf("ucp_dt_create_generic: %w", err)
		}
	})
	return l.copyDT, l.copyErr
}

var (
	loadOnce  sync.Once
	loadErr   error
	setByLoad []string // written once, by the first Load
	loaded    atomic.Pointer[lib]
	dlMu      sync.Mutex // dlopen and dlsym (their dlerror text is copied in the C call: shim.c)

	memMaps atomic.Int64 // successful ucp_mem_map calls, for tests (MemMaps)
)

// dlMsgSize bounds the dlerror text kept of a failed dlopen or dlsym; a longer one is cut.
const dlMsgSize = 512

// dlFailed, when set (by tests), runs after a dlopen or dlsym fails and before its message is
// read, on the same thread: where the goroutine may leave the thread and another goroutine
// make a dl call of its own there.
var dlFailed func()

// libName is the library Load opens.
const libName = "libucp.so.0"

// SetByLoad returns the variables the first Load set in the environment, as "NAME=value"
// (UCX_ERROR_SIGNALS, UCX_TCP_TX_SEG_SIZE where the environment did not set them): what a
// benchmark drops to run another UCX program as UCX runs by default. It loads UCX first.
func SetByLoad() []string {
	_, _ = load()
	return slices.Clone(setByLoad)
}

// Load opens libucp.so.0 (or the library named by LibraryEnv), once; later calls return the
// first call's result. The error wraps pinmalloc.ErrNoUCX and says why: the dlopen failure,
// an entry point missing, or a UCX older than 1.11.
func Load() error {
	_, err := load()
	return err
}

func load() (*lib, error) {
	loadOnce.Do(func() {
		path := libName
		if p := os.Getenv(LibraryEnv); p != "" {
			path = p
		}
		setenv := func(k, v string) {
			_ = os.Setenv(k, v)
			setByLoad = append(setByLoad, k+"="+v)
		}
		// UCX catches these signals to print a backtrace; the Go runtime owns them.
		if _, set := os.LookupEnv("UCX_ERROR_SIGNALS"); !set {
			setenv("UCX_ERROR_SIGNALS", "")
		}
		// Sends by copy (ucx.go) go in tcp's send segments: 64 KiB, as its receive segments
		// are, rather than 8 KiB, unless the environment sizes either.
		_, tx := os.LookupEnv("UCX_TCP_TX_SEG_SIZE")
		if _, rx := os.LookupEnv("UCX_TCP_RX_SEG_SIZE"); !tx && !rx {
			setenv("UCX_TCP_TX_SEG_SIZE", "64k")
		}
		l, err := open(path)
		if err == nil {
			err = l.checkVersion()
		}
		if err != nil {
			loadErr = err
			return
		}
		loaded.Store(l)
	})
	return loaded.Load(), loadErr
}

// cstring returns a NUL-terminated copy of s in Go memory, for the duration of a C call.
func cstring(s string) *C.char {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return (*C.char)(unsafe.Pointer(&b[0]))
}

func open(path string) (*lib, error) {
	dlMu.Lock()
	defer dlMu.Unlock()
	var cmsg [dlMsgSize]C.char
	h := C.pm_dlopen(cstring(path), &cmsg[0], C.size_t(len(cmsg)))
	if h == 0 {
		if dlFailed != nil {
			dlFailed()
		}
		msg := C.GoString(&cmsg[0])
		if !strings.Contains(msg, path) {
			msg = path + ": " + msg
		}
		return nil, fmt.Errorf("%w: %s (apt-get install libucx0)", pinmalloc.ErrNoUCX, msg)
	}
	return &lib{path: path, handle: h}, nil
}

// fn returns entry point id, resolving it on first use.
func (l *lib) fn(id symID) (C.uintptr_t, error) {
	s := &l.syms[id]
	s.once.Do(func() {
		dlMu.Lock()
		defer dlMu.Unlock()
		var cmsg [dlMsgSize]C.char
		if s.fn = C.pm_dlsym(l.handle, cstring(symbols[id]), &cmsg[0], C.size_t(len(cmsg))); s.fn == 0 {
			if dlFailed != nil {
				dlFailed()
			}
			s.err = fmt.Errorf("%w: %s lacks %s (%s)", pinmalloc.ErrNoUCX, l.path, symbols[id], C.GoString(&cmsg[0]))
		}
	})
	return s.fn, s.err
}

// must returns entry point id, or panics: only for entry points checkVersion resolved.
func (l *lib) must(id symID) C.uintptr_t {
	f, err := l.fn(id)
	if err != nil {
		panic(err)
	}
	return f
}

func (l *lib) checkVersion() error {
	maj, min, rel, err := l.version()
	if err != nil {
		return err
	}
	if maj != apiMajor || min < apiMinor {
		return fmt.Errorf("%w: %s is version %d.%d.%d; this module needs %d.%d or later", pinmalloc.ErrNoUCX, l.path, maj, min, rel, apiMajor, apiMinor)
	}
	// The entry points the callbacks and every Worker need: a library that lacks one is no
	// UCX this module can use, said at Load.
	for _, id := range []symID{symStatusString, symRequestFree, symWorkerProgress} {
		if _, err := l.fn(id); err != nil {
			return err
		}
	}
	return nil
}

func (l *lib) version() (maj, min, rel uint, err error) {
	f, err := l.fn(symGetVersion)
	if err != nil {
		return 0, 0, 0, err
	}
	var a, b, c C.uint
	C.pm_get_version(f, &a, &b, &c)
	return uint(a), uint(b), uint(c), nil
}

// Version returns the loaded library's version.
func Version() (major, minor, release uint, err error) {
	l, err := load()
	if err != nil {
		return 0, 0, 0, err
	}
	return l.version()
}

// MemMaps returns the number of successful ucp_mem_map calls in the process so far.
func MemMaps() int64 { return memMaps.Load() }

func statusText(s Status) string {
	l := loaded.Load()
	if l == nil {
		return ""
	}
	f, err := l.fn(symStatusString)
	if err != nil {
		return ""
	}
	return C.GoString(C.pm_status_string(f, C.int(s)))
}

func check(s C.int) error {
	if s == statusOK {
		return nil
	}
	return Status(s)
}

// call resolves id and runs f with it.
func (l *lib) call(id symID, f func(C.uintptr_t) C.int) error {
	fn, err := l.fn(id)
	if err != nil {
		return err
	}
	return check(f(fn))
}

// Context is a UCP context (ucp_context_h) with the features this module uses: RMA, active
// messages and wakeup.
type Context struct {
	l        *lib
	h        C.uintptr_t
	memTypes uint64
}

// NewContext creates a context, reading UCX's configuration from the environment (UCX_TLS,
// UCX_NET_DEVICES, ...). name names it in UCX's logs.
func NewContext(name string) (*Context, error) {
	l, err := load()
	if err != nil {
		return nil, err
	}
	var cfg C.uintptr_t
	if err := l.call(symConfigRead, func(f C.uintptr_t) C.int { return C.pm_config_read(f, &cfg) }); err != nil {
		return nil, fmt.Errorf("ucp_config_read: %w", err)
	}
	release, err := l.fn(symConfigRelease)
	if err != nil {
		return nil, err
	}
	defer C.pm_call_ptr(release, cfg)
	c := &Context{l: l}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	features := C.uint64_t(C.PM_UCP_FEATURE_RMA | C.PM_UCP_FEATURE_AM | C.PM_UCP_FEATURE_WAKEUP)
	if err := l.call(symInitVersion, func(f C.uintptr_t) C.int {
		return C.pm_init(f, apiMajor, apiMinor, features, cname, cfg, &c.h)
	}); err != nil {
		return nil, fmt.Errorf("ucp_init: %w%s", err, noDeviceHint(err, os.LookupEnv))
	}
	var types C.uint64_t
	if err := l.call(symContextQuery, func(f C.uintptr_t) C.int { return C.pm_context_memtypes(f, c.h, &types) }); err != nil {
		c.Close()
		return nil, fmt.Errorf("ucp_context_query: %w", err)
	}
	c.memTypes = uint64(types)
	return c, nil
}

// MemoryTypes returns the memory types the context's transports can reach, a bit per
// ucs_memory_type_t (1<<MemoryHost, 1<<MemoryCUDA, ...).
func (c *Context) MemoryTypes() uint64 { return c.memTypes }

// Close destroys the context; its workers must be destroyed first.
func (c *Context) Close() {
	if f, err := c.l.fn(symCleanup); err == nil {
		C.pm_call_ptr(f, c.h)
	}
}

// MemMap registers [addr, addr+n), memory of type memType, with every transport of the context
// (ucp_mem_map). nonblock asks for a registration that pins nothing up front (on-demand paging
// where the NIC has it): for a range not yet backed by memory.
func (c *Context) MemMap(addr, n uintptr, memType int, nonblock bool) (Mem, error) {
	var m C.uintptr_t
	nb := C.int(0)
	if nonblock {
		nb = 1
	}
	err := c.l.call(symMemMap, func(f C.uintptr_t) C.int {
		return C.pm_mem_map(f, c.h, C.uintptr_t(addr), C.size_t(n), C.int(memType), nb, &m)
	})
	if err != nil {
		return 0, fmt.Errorf("ucp_mem_map of [%#x, +%d): %w", addr, n, err)
	}
	memMaps.Add(1)
	return Mem(m), nil
}

// MemAlloc allocates at least n bytes with UCX (ucp_mem_map with UCP_MEM_MAP_ALLOCATE), from
// the first memory domain of UCX_ALLOC_PRIO that allocates (sysv, posix: a segment peers of
// this host map, so that they reach it with ucp_rkey_ptr), registered with every transport of
// the context. It returns the registration, the address and the length UCX gave; MemUnmap
// frees it.
func (c *Context) MemAlloc(n uintptr) (Mem, uintptr, uintptr, error) {
	var m, addr C.uintptr_t
	var got C.size_t
	q, err := c.l.fn(symMemQuery)
	if err != nil {
		return 0, 0, 0, err
	}
	err = c.l.call(symMemMap, func(f C.uintptr_t) C.int {
		return C.pm_mem_alloc(f, q, c.h, C.size_t(n), &m, &addr, &got)
	})
	if err != nil {
		if m != 0 {
			_ = c.MemUnmap(Mem(m))
		}
		return 0, 0, 0, fmt.Errorf("ucp_mem_map (allocate %d bytes): %w", n, err)
	}
	if addr == 0 || uintptr(got) < n {
		_ = c.MemUnmap(Mem(m))
		return 0, 0, 0, fmt.Errorf("ucp_mem_map (allocate %d bytes) gave %d bytes at %#x: %w", n, got, addr, Status(-4))
	}
	memMaps.Add(1)
	return Mem(m), uintptr(addr), uintptr(got), nil
}

// MemUnmap undoes MemMap.
func (c *Context) MemUnmap(m Mem) error {
	return c.l.call(symMemUnmap, func(f C.uintptr_t) C.int { return C.pm_status_ptr2(f, c.h, C.uintptr_t(m)) })
}

// PackRkey returns the remote key of registration m, packed: what a peer unpacks (UnpackRkey)
// to reach the memory.
func (c *Context) PackRkey(m Mem) ([]byte, error) {
	var buf unsafe.Pointer
	var n C.size_t
	if err := c.l.call(symRkeyPack, func(f C.uintptr_t) C.int { return C.pm_rkey_pack(f, c.h, C.uintptr_t(m), &buf, &n) }); err != nil {
		return nil, fmt.Errorf("ucp_rkey_pack: %w", err)
	}
	out := C.GoBytes(buf, C.int(n))
	if f, err := c.l.fn(symRkeyBufferRelease); err == nil {
		C.pm_call_vptr(f, buf)
	}
	return out, nil
}
