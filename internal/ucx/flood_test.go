//go:build cgo && linux

package ucx

import (
	"bytes"
	"testing"
)

// A flood of messages (EventMessage) in one progress call. The callbacks' queue is bounded
// (NewWorker's msgLimit): past it a message is dropped, and its sender, whose send completed,
// is never told. So the progress stops once half the queue is taken, leaving the rest of a
// flood in UCX's transports, where it pushes back on its sender; and a message dropped all the
// same (one call of UCX's progress delivered more than the half left) is reported, its header
// kept, so that its receiver fails the connection it names rather than lose it unseen.

// TestFloodPushesBack: a progress call whose rounds each deliver 16 KiB stops once the queue
// (64 KiB) is half full: nothing is dropped. It called all 8 rounds and dropped half of 128 KiB.
func TestFloodPushesBack(t *testing.T) {
	msg := bytes.Repeat([]byte{7}, 4096)
	queued, dropped, _ := flood(msg, 4, 8, 64<<10)
	if dropped != 0 {
		t.Fatalf("%d messages of 4 KiB queued and %d dropped by a progress of 8 rounds of 4: it goes on past a queue half full", queued, dropped)
	}
	if queued == 0 || queued >= 16 {
		t.Fatalf("%d messages queued of 32 delivered", queued)
	}
}

// TestFloodDropReported: a single round of UCX's progress that delivers twice what the queue
// holds drops what does not fit, and reports each message dropped by an event with its first
// PeekLen bytes (the protocol's header, which names the connection) and its length: dropped
// unseen, it was lost, its sender told nothing.
func TestFloodDropReported(t *testing.T) {
	msg := bytes.Repeat([]byte("pmrm-header-0123"), 256) // 4 KiB
	queued, dropped, reported := flood(msg, 32, 1, 64<<10)
	if dropped == 0 {
		t.Fatalf("all %d messages of 4 KiB queued in a queue of 64 KiB", queued)
	}
	if reported != dropped {
		t.Fatalf("%d messages queued, %d dropped, %d of those reported: a message dropped unseen is lost", queued, dropped, reported)
	}
}
