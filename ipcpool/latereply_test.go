package ipcpool

import (
	"testing"
	"time"
)

// A grant whose reply the reader has in hand as its request gives up is the process's all
// the same: the request takes it, or it is given back, never kept by the owner for a process
// that does not know it. (The request gave up and the reply, handed over a moment later, was
// dropped: a grant lost until the process left.)
func TestGrantReplyAsRequestGivesUpNotLost(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: 100 * time.Millisecond})
	cl := p.cl
	cl.mu.Lock()
	cl.pause = func(m msg) {
		// Until the request has given up (the grant is in late), or long past its deadline.
		for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
			cl.mu.Lock()
			n := cl.late[m.seq]
			cl.mu.Unlock()
			if n > 0 {
				return
			}
		}
	}
	cl.mu.Unlock()
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	time.Sleep(20 * time.Millisecond) // a grant given back is on its way to the owner
	w.mu.Lock()
	held := w.heldBy(p.slot)
	w.mu.Unlock()
	if mine := p.src.grantsHeld(); held != mine {
		t.Fatalf("the owner lends the process %d grants, the process knows %d", held, mine)
	}
	must(t, "Free", p.Free(b))
}
