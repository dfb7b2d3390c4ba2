package debugpage

import (
	"strings"
	"testing"
)

// TestWriteStreamsParked: a device heap's parked frees (a destroyed stream's, or held blocks'
// whose clear was refused) show apart from a live stream of the same handle, and say what they
// wait for. Before, the table dropped DeferredByStream's Parked: the two rows read alike.
func TestWriteStreamsParked(t *testing.T) {
	var b strings.Builder
	writeStreams(&b, []StreamDeferred{{Stream: 0x10, Buffers: 1, Bytes: 4096}, {Stream: 0x10, Buffers: 2, Bytes: 8192, Parked: true}})
	page := b.String()
	for _, want := range []string{
		"<tr><td>0x10</td><td>1</td><td>4 KiB</td></tr>",
		"<tr><td>0x10 (parked: waits for a synchronize of the context)</td><td>2</td><td>8 KiB</td></tr>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the streams table lacks %q:\n%s", want, page)
		}
	}
}
