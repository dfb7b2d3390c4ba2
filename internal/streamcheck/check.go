package streamcheck

import "bytes"

// Checking the system against the model.

// compare is nil when got equals want, and otherwise a failure naming object id, the first
// differing offset (plus base) and how many bytes differ.
func compare(what string, id int, got, want []byte, base int) *Failure {
	if bytes.Equal(got, want) {
		return nil
	}
	first, diff := -1, 0
	for i := range want {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			diff++
		}
	}
	if diff == 0 {
		return nil
	}
	return failf(what, "object #%d: %d of %d bytes differ, first at offset %d: got %#x want %#x%s",
		id, diff, len(want), base+first, got[first], want[first], zeroNote(got[first:first+min(64, len(want)-first)]))
}

// zeroNote says when the bytes found are zeros (a scrub landed, or fresh memory).
func zeroNote(b []byte) string {
	if nonZero(b) < 0 {
		return " (zeros)"
	}
	return ""
}

// check compares every idle pool buffer and device block with the model.
func (w *world) check() *Failure {
	for _, id := range w.bufID {
		bf := w.bufs[id]
		if bf.busy >= 0 {
			continue
		}
		w.checkedBytes += int64(len(bf.b))
		if f := compare("pool buffer bytes", id, bf.b, bf.want, 0); f != nil {
			return f
		}
	}
	for _, id := range w.devID {
		d := w.dev[id]
		if d.busy >= 0 {
			continue
		}
		if cap(w.scratch) < d.n {
			w.scratch = make([]byte, d.n)
		}
		got := w.scratch[:d.n]
		if err := w.heap.DtoH(got, d.p); err != nil {
			return unexpected("device.Heap.DtoH", err)
		}
		w.checkedBytes += int64(d.n)
		if f := compare("device block bytes", id, got, d.want, 0); f != nil {
			return f
		}
	}
	return nil
}
