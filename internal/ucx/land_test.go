//go:build cgo && linux

package ucx

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzLandReply: the C callback that lands the answer to a get by message straight in the
// get's buffer (land_reply: a peer's header and bytes, checked in C) lands it exactly when the
// header is a reply (kind 3) with status OK and its reserved bytes zero, names the armed slot's
// operation (its slot index, and the generation with it) and connection, and the bytes are the
// length the slot waits for: then it copies them to the slot's destination, once, and disarms
// the slot; otherwise it writes nothing. The flags choose the armed operation, connection and
// length: the header's own (so that mutations of the header reach a landing) or others.
func FuzzLandReply(f *testing.F) {
	const nslots = 4
	var h [HeaderLen]byte
	h[0] = 3
	binary.LittleEndian.PutUint64(h[8:], 0xc0ffee)
	binary.LittleEndian.PutUint64(h[16:], 5<<32|2)
	f.Add(h[:], []byte("sixteen bytes ok"), uint8(7))
	f.Add(h[:], []byte("sixteen bytes ok"), uint8(3))
	h[1] = 1 // a refusal's status
	f.Add(h[:], []byte{}, uint8(7))
	f.Fuzz(func(t *testing.T, in, data []byte, flags uint8) {
		var h [HeaderLen]byte
		copy(h[:], in)
		conn, op := binary.LittleEndian.Uint64(h[8:]), binary.LittleEndian.Uint64(h[16:])
		armedOp, armedConn, dlen := uint64(5<<32|2), uint64(0xc0ffee), len(data)+1
		if flags&1 != 0 {
			armedOp = op
		}
		if flags&2 != 0 {
			armedConn = conn
		}
		if flags&4 != 0 {
			dlen = len(data)
		}
		slot := uint32(armedOp) // ArmReply arms the slot the operation id names
		if slot >= nslots {
			slot = 0 // armed for an id of another slot: remote never does, and nothing may land
		}
		dst := bytes.Repeat([]byte{0xEE}, max(dlen, 1))[:dlen]
		landed, disarmed := landReply(&h, data, nslots, slot, armedOp, armedConn, dst)
		reserved := true
		for _, i := range []int{1, 2, 3, 4, 5, 6, 7, 44, 45, 46, 47} {
			reserved = reserved && h[i] == 0
		}
		want := h[0] == 3 && reserved && op != 0 && uint32(op) == slot && op == armedOp && conn == armedConn && len(data) == dlen
		if landed != want {
			t.Fatalf("header %x, %d bytes, armed op %#x conn %#x len %d in slot %d: landed %v, want %v", h, len(data), armedOp, armedConn, dlen, slot, landed, want)
		}
		if landed && (!bytes.Equal(dst, data) || !disarmed) {
			t.Fatalf("landed: destination %x (want %x), slot disarmed %v", dst, data, disarmed)
		}
		if !landed && (disarmed || !bytes.Equal(dst, bytes.Repeat([]byte{0xEE}, dlen))) {
			t.Fatalf("not landed, yet the destination was written (%x) or the slot disarmed (%v)", dst, disarmed)
		}
	})
}
