package cuda

import (
	"sync"
	"sync/atomic"
)

// The capture gate. The library asks whether a user's stream captures a CUDA graph
// (StreamIsCapturing) before it queries, synchronizes or records a point in the stream on its
// own account, since a capture forbids each (capture.go). A capture begun on another thread
// between the ask and the act would be invalidated by the query, or take the record as a node
// of its graph. StreamBeginCapture, of every device, waits for the gate; a check and its act
// hold it (HoldCaptureBegins), so a capture begun through this package never falls between.
// A capture begun by other code (another binding of the driver) does not wait: see
// EventRecordOutsideCapture for what the record then does, and streamq's capture.go.
var (
	captureGate    sync.RWMutex
	captureWaiting atomic.Int32 // StreamBeginCapture calls waiting for the gate
)

// HoldCaptureBegins holds off the begin of every capture made through this package
// (StreamBeginCapture, of any device) until ReleaseCaptureBegins; captures begun already go on.
// Hold it across a check that a user's stream is not capturing and the query, synchronize or
// record the check allows. Holds of many goroutines overlap; a goroutine must not hold it twice
// (a begin waiting meanwhile would make the second hold wait for the first), nor wait under it
// for anything but the driver's calls. It costs two atomic operations.
func HoldCaptureBegins() { captureGate.RLock() }

// ReleaseCaptureBegins ends a hold of HoldCaptureBegins.
func ReleaseCaptureBegins() { captureGate.RUnlock() }

// CaptureBeginsWaiting returns the number of StreamBeginCapture calls waiting for holds of
// HoldCaptureBegins to end: a test that begins a capture while a check holds the gate sees its
// begin held off.
func CaptureBeginsWaiting() int { return int(captureWaiting.Load()) }

// gatedBegin runs begin, the driver's begin of a capture, with the gate closed to new holds
// and the holds in progress ended.
func gatedBegin(begin func() error) error {
	captureWaiting.Add(1)
	captureGate.Lock()
	captureWaiting.Add(-1)
	defer captureGate.Unlock()
	return begin()
}
