package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func sampleDescriptor() Descriptor {
	return Descriptor{worker: 0x1234, region: 7, base: 0x7f0000000000, size: 1 << 30,
		addr: 0x7f0000100000, n: 16 << 10, rkey: packedKey(1<<1|1<<3|1<<5, memHost, "packed", "", "key")}
}

// packedKey returns a remote key as UCX 1.13 packs one (checkRkey): its memory-domain map,
// memory type, and for each domain a length byte and the domain's key, keys[i] for the map's
// i-th bit.
func packedKey(mdMap uint64, memType uint8, keys ...string) string {
	b := binary.NativeEndian.AppendUint64(nil, mdMap)
	b = append(b, memType)
	for _, k := range keys {
		b = append(append(b, byte(len(k))), k...)
	}
	return string(b)
}

func TestDescriptorRoundTrip(t *testing.T) {
	d := sampleDescriptor()
	b, err := d.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != d.EncodedLen() {
		t.Fatalf("%d bytes, EncodedLen %d", len(b), d.EncodedLen())
	}
	var e Descriptor
	if err := e.UnmarshalBinary(b); err != nil || e != d {
		t.Fatalf("round trip: %v, %v", e, err)
	}
	// A list, read in a loop.
	list, _ := d.AppendBinary(nil)
	s, _ := d.Slice(100, 200)
	list, _ = s.AppendBinary(list)
	x, rest, err := ParseDescriptor(list)
	if err != nil || x != d {
		t.Fatal(x, err)
	}
	y, rest, err := ParseDescriptor(rest)
	if err != nil || y != s || len(rest) != 0 || y.Len() != 200 || y.addr != d.addr+100 {
		t.Fatal(y, err, len(rest))
	}
	if err := e.UnmarshalBinary(list); !errors.Is(err, ErrDescriptor) {
		t.Errorf("UnmarshalBinary of two descriptors: %v", err)
	}
	if _, err := (Descriptor{}).MarshalBinary(); !errors.Is(err, ErrDescriptor) {
		t.Errorf("MarshalBinary of the zero Descriptor: %v", err)
	}
	if _, err := (Descriptor{}).Slice(0, 1); !errors.Is(err, ErrDescriptor) {
		t.Errorf("Slice of the zero Descriptor: %v", err)
	}
	for _, c := range [][2]int{{0, 0}, {-1, 1}, {0, 16<<10 + 1}, {16 << 10, 1}, {1, 16 << 10}} {
		if _, err := d.Slice(c[0], c[1]); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Slice(%d, %d): %v", c[0], c[1], err)
		}
	}
}

// TestDescriptorRefusesBadFields encodes descriptors whose fields cannot be, with a correct
// checksum (what a peer that lies would send), and checks each is refused.
func TestDescriptorRefusesBadFields(t *testing.T) {
	bad := map[string]func(*Descriptor){
		"worker 0":                 func(d *Descriptor) { d.worker = 0 },
		"memory type 9":            func(d *Descriptor) { d.memType = 9 },
		"empty region":             func(d *Descriptor) { d.size = 0 },
		"region wrapping around":   func(d *Descriptor) { d.base, d.size = ^uint64(0)-10, 100 },
		"empty buffer":             func(d *Descriptor) { d.n = 0 },
		"buffer before the region": func(d *Descriptor) { d.addr = d.base - 1 },
		"buffer past the region":   func(d *Descriptor) { d.addr = d.base + d.size - 10 },
		"buffer wrapping around":   func(d *Descriptor) { d.addr, d.n = d.base+10, ^uint64(0) },
		"no key":                   func(d *Descriptor) { d.rkey = "" },
		"a key too long":           func(d *Descriptor) { d.rkey = string(make([]byte, MaxKeyLen+1)) },
		// Remote keys UCX 1.13 reads with no length (checkRkey): before, any bytes passed.
		"a key of 8 bytes":              func(d *Descriptor) { d.rkey = d.rkey[:rkeyMDMap] },
		"a key of memory type 200":      func(d *Descriptor) { d.rkey = packedKey(1<<1|1<<3|1<<5, 200, "packed", "", "key") },
		"a key of memory type 9":        func(d *Descriptor) { d.rkey = packedKey(1<<1|1<<3|1<<5, 9, "packed", "", "key") },
		"a CUDA key in a host one":      func(d *Descriptor) { d.rkey = packedKey(1<<1|1<<3|1<<5, memCUDA, "packed", "", "key") },
		"a host key in a CUDA one":      func(d *Descriptor) { d.memType = memCUDA },
		"a key short of its last key":   func(d *Descriptor) { d.rkey = d.rkey[:len(d.rkey)-1] },
		"a key short of a length byte":  func(d *Descriptor) { d.rkey = packedKey(1<<1|1<<3|1<<5|1<<63, memHost, "packed", "", "key") },
		"a key of 64 domains, 1 byte":   func(d *Descriptor) { d.rkey = packedKey(^uint64(0), memHost, "x") },
		"a key whose length passes end": func(d *Descriptor) { d.rkey = packedKey(1, memHost, "packed")[:rkeyFixed+6] },
	}
	for name, f := range bad {
		d := sampleDescriptor()
		f(&d)
		b := encodeUnchecked(d)
		if _, _, err := ParseDescriptor(b); !errors.Is(err, ErrDescriptor) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, rkey := range []string{
		packedKey(0, memHost),
		packedKey(1, memHost, ""),
		packedKey(1<<63, memHost, string(make([]byte, 255))),
		packedKey(1<<2|1<<7, memHost, "a", "bc") + "\x03sysdev-and-distances", // what follows is not read
	} {
		d := sampleDescriptor()
		d.rkey = rkey
		if _, _, err := ParseDescriptor(encodeUnchecked(d)); err != nil {
			t.Errorf("remote key % x: %v", rkey, err)
		}
	}
	d := sampleDescriptor()
	d.memType, d.rkey = memCUDA, packedKey(1<<1|1<<3|1<<5, memCUDA, "packed", "", "key")
	if _, _, err := ParseDescriptor(encodeUnchecked(d)); err != nil {
		t.Errorf("a CUDA descriptor of a CUDA key: %v", err)
	}
	b := encodeUnchecked(sampleDescriptor())
	b[20] = 1 // the reserved word, under a recomputed checksum
	if _, _, err := ParseDescriptor(reseal(b)); !errors.Is(err, ErrDescriptor) {
		t.Errorf("reserved word set: %v", err)
	}
	b = encodeUnchecked(sampleDescriptor())
	b[4] = 2
	if _, _, err := ParseDescriptor(reseal(b)); !errors.Is(err, ErrDescriptor) {
		t.Errorf("version 2: %v", err)
	}
}

// encodeUnchecked is AppendBinary without its zero check, for forging.
func encodeUnchecked(d Descriptor) []byte {
	w := d.worker
	if w == 0 {
		d.worker = 1
	}
	b, _ := d.AppendBinary(nil)
	if w == 0 {
		copy(b[8:16], make([]byte, 8))
		b = reseal(b)
	}
	return b
}

// reseal recomputes b's checksum.
func reseal(b []byte) []byte {
	end := len(b) - descTrailer
	b = append(b[:end:end], 0, 0, 0, 0)
	sum := crcOf32(b[:end])
	b[end], b[end+1], b[end+2], b[end+3] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	return b
}

// FuzzParseDescriptor: whatever the bytes, ParseDescriptor returns an error or a descriptor
// whose buffer lies in its region, never panics, and a descriptor it accepts encodes back to
// the bytes it read.
func FuzzParseDescriptor(f *testing.F) {
	d := sampleDescriptor()
	b, _ := d.MarshalBinary()
	f.Add(b)
	f.Add(b[:len(b)-1])
	f.Add(append(b, b...))
	f.Add([]byte("pmrd"))
	for _, rkey := range []string{packedKey(1<<1|1<<3|1<<5, 200, "packed", "", "key"), packedKey(1<<1|1<<3|1<<5, memCUDA, "packed", "", "key"), packedKey(^uint64(0), memHost, "x")} {
		d := sampleDescriptor()
		d.rkey = rkey
		f.Add(encodeUnchecked(d)) // refused (TestDescriptorRefusesBadFields)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d, rest, err := ParseDescriptor(in)
		if err != nil {
			if !errors.Is(err, ErrDescriptor) || len(rest) != len(in) {
				t.Fatalf("error %v, rest %d of %d", err, len(rest), len(in))
			}
			return
		}
		if d.n == 0 || d.addr < d.base || d.addr+d.n > d.base+d.size || d.base+d.size < d.base || d.worker == 0 {
			t.Fatalf("accepted an impossible descriptor %v", d)
		}
		out, err := d.AppendBinary(nil)
		if err != nil || !bytes.Equal(out, in[:len(in)-len(rest)]) {
			t.Fatalf("re-encoding differs: %v", err)
		}
		if _, err := d.Slice(0, d.Len()); err != nil {
			t.Fatal(err)
		}
	})
}

func crcOf32(b []byte) uint32 { return crc32Checksum(b) }
