package remote

import "testing"

// smallSegments is TCP with UCX's own segment sizes (8 KiB), set in the environment as a user
// may set them: the loader then leaves both alone (ucx.Load), and a put's part or a get's
// answer (32 KiB) crosses in fragments that UCX reassembles in a buffer of its own before the
// callback sees it, where with the loader's 64 KiB it crosses in one.
var smallSegments = transport{"tcp-8k", [][2]string{{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"},
	{"UCX_TCP_TX_SEG_SIZE", "8k"}, {"UCX_TCP_RX_SEG_SIZE", "8k"}}, false, false}

// TestSmallTCPSegments runs TestTwoProcesses' transfers, every byte checked, by message and by
// UCX's emulation, over TCP segments of 8 KiB in both processes.
func TestSmallTCPSegments(t *testing.T) {
	needUCX(t)
	t.Run("auto", func(t *testing.T) { twoProcesses(t, smallSegments, false, ModeAuto) })
	t.Run("rma", func(t *testing.T) { twoProcesses(t, smallSegments, false, ModeRMA) })
}
