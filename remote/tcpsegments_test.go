package remote

import (
	"errors"
	"strings"
	"testing"
)

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

// A receive segment smaller than the send segment, which UCX refuses with no more than
// "Invalid parameter", is an error of ErrNoUCX that names the two variables.
func TestTCPSegmentsRefused(t *testing.T) {
	needUCX(t)
	transport{"tcp-rx-small", [][2]string{{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"},
		{"UCX_TCP_TX_SEG_SIZE", "64k"}, {"UCX_TCP_RX_SEG_SIZE", "8k"}}, false, false}.set(t)
	w, err := New(Options{})
	if err == nil {
		w.Close()
		t.Fatal("New made a worker with tcp's receive segments smaller than its send segments")
	}
	if !errors.Is(err, ErrNoUCX) || !strings.Contains(err.Error(), "UCX_TCP_RX_SEG_SIZE 8k is smaller than UCX_TCP_TX_SEG_SIZE 64k") {
		t.Fatalf("New: %v; want ErrNoUCX naming the two segment sizes", err)
	}
	t.Log(err)
}
