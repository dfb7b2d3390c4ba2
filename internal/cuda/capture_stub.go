//go:build !cgo || !linux

package cuda

func (*driver) streamBeginCapture(Stream, CaptureMode) error { return errStub }
func (*driver) streamEndCapture(Stream) (Graph, error)       { return 0, errStub }
func (*driver) graphDestroy(Graph) error                     { return errStub }
func (*driver) threadExchangeCaptureMode(CaptureMode) (CaptureMode, error) {
	return 0, errStub
}
func (*driver) streamIsCapturingIn(uintptr, Stream) (CaptureStatus, error) {
	return CaptureNone, errStub
}
func (*driver) eventRecordOutsideCaptureIn(uintptr, Event, Stream) (CaptureStatus, bool, bool,
	error) {
	return CaptureNone, false, false, errStub
}
func (*driver) hookCaptureCheck(string, int, int) error { return errStub }
