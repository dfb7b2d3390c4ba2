//go:build !cgo || !linux

package ucx

import (
	"fmt"
	"runtime"

	"github.com/pinmalloc/pinmalloc"
)

// Without cgo, or off linux, there is no UCX: Load always fails, so no Context is ever made
// and the methods below are unreachable; they exist so that the package compiles.

var errStub = fmt.Errorf("%w: built without cgo or not on linux (%s/%s)", pinmalloc.ErrNoUCX, runtime.GOOS, runtime.GOARCH)

// Load reports that UCX cannot be loaded in this build.
func Load() error { return errStub }

func SetByLoad() []string { return nil }

// Version reports that UCX cannot be loaded in this build.
func Version() (major, minor, release uint, err error) { return 0, 0, 0, errStub }

// MemMaps returns 0: nothing is registered in this build.
func MemMaps() int64 { return 0 }

func statusText(Status) string { return "" }

// AMID is the active-message id this binding's messages use; data messages use AMID+1.
const AMID = 0x7069

// Context is a UCP context; none is made in this build.
type Context struct{}

// NewContext reports that UCX cannot be loaded in this build.
func NewContext(string) (*Context, error) { return nil, errStub }

func (*Context) MemoryTypes() uint64                             { return 0 }
func (*Context) Close()                                          {}
func (*Context) MemMap(uintptr, uintptr, int, bool) (Mem, error) { return 0, errStub }
func (*Context) MemUnmap(Mem) error                              { return errStub }
func (*Context) MemAlloc(uintptr) (Mem, uintptr, uintptr, error) { return 0, 0, 0, errStub }
func (*Context) PackRkey(Mem) ([]byte, error)                    { return nil, errStub }
func (*Context) NewWorker(int, int) (*Worker, error)             { return nil, errStub }

// Worker is a UCP worker; none is made in this build.
type Worker struct{ NoPeerFailure bool }

func (*Worker) Slots() int                                               { return 0 }
func (*Worker) Destroy()                                                 {}
func (*Worker) Dropped() uint64                                          { return 0 }
func (*Worker) Landed() uint64                                           { return 0 }
func (*Worker) Queued() (uint64, uint64)                                 { return 0, 0 }
func (*Worker) LimitMessages(int, int, byte)                             {}
func (*Worker) LimitData(int)                                            {}
func (*Worker) DropSpares()                                              {}
func (*Worker) Spares() int                                              { return 0 }
func (*Worker) Address() ([]byte, error)                                 { return nil, errStub }
func (*Worker) EventFD() (int, error)                                    { return -1, errStub }
func (*Worker) Arm() (bool, error)                                       { return false, errStub }
func (*Worker) Signal() error                                            { return errStub }
func (*Worker) Progress(int, []Completion) (int, bool)                   { return 0, false }
func (*Worker) Events(out []Event, _ int) []Event                        { return out }
func (*Worker) Listen([]byte, uint64) (Listener, error)                  { return 0, errStub }
func (*Worker) ListenerPort(Listener) (int, error)                       { return 0, errStub }
func (*Worker) DestroyListener(Listener)                                 {}
func (*Worker) Reject(Listener, ConnRequest) error                       { return errStub }
func (*Worker) ConnRequestAddr(ConnRequest) ([]byte, error)              { return nil, errStub }
func (*Worker) ConnectAddress([]byte) (Ep, error)                        { return 0, errStub }
func (*Worker) ConnectSockaddr([]byte) (Ep, error)                       { return 0, errStub }
func (*Worker) Accept(ConnRequest) (Ep, error)                           { return 0, errStub }
func (*Worker) CloseEp(Ep, bool, uint32) (bool, error)                   { return false, errStub }
func (*Worker) UnpackRkey(Ep, []byte) (Rkey, error)                      { return 0, errStub }
func (*Worker) RkeyPtr(Rkey, uint64) (uintptr, error)                    { return 0, errStub }
func (*Worker) DestroyRkey(Rkey)                                         {}
func (*Worker) Post([]Op) (int, error)                                   { return 0, errStub }
func (*Worker) PackedBytes() uint64                                      { return 0 }
func (*Worker) SendMessage(Ep, []byte, bool, bool, uint32) (bool, error) { return false, errStub }

func opSize() uintptr { return 136 }

func (*Worker) EpInfo(Ep) (string, error)                                { return "", errStub }
func (*Worker) CopyData(uint64, uintptr)                                 {}
func (*Worker) ArmReply(uint32, uint64, uint64, uintptr, uint64)         {}
func (*Worker) DisarmReply(uint32)                                       {}
func (*Worker) ReleaseData(uint64)                                       {}
func (*Worker) RecvData(uint64, uintptr, Mem, int, uint32) (bool, error) { return false, errStub }

func open(string) (*Context, error) { return nil, errStub }
