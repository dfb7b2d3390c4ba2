package remote

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// Descriptor names a buffer of a pool (or device heap) registered with a Worker, for another
// process to read with Get and write with Put: the worker that registered it, the region that
// holds it (its range and its packed remote key, made once when the region was registered),
// and the buffer's address and length. It is a small value (about 60 bytes and the key),
// made by Registration.Describe, sent to the peer as bytes (AppendBinary, MarshalBinary) and
// read back there with ParseDescriptor, which refuses bytes that are truncated, corrupted or
// not self-consistent. A connection refuses a descriptor of a worker other than its peer,
// and one whose region contradicts what an earlier descriptor said of it.
//
// A descriptor stays valid while its buffer is live at its owner: the owner frees the buffer
// only once its peer is done with it, as with any memory lent out.
type Descriptor struct {
	worker     uint64
	region     uint32
	memType    uint8
	base, size uint64
	addr, n    uint64
	rkey       string
}

// Descriptor encoding, little-endian: magic, version, memory type, key length, worker,
// region, reserved (zero), region base and size, buffer address and length, the key, and a
// CRC-32C of everything before it.
const (
	descMagic   = "pmrd"
	descVersion = 1
	descHeader  = 56
	descTrailer = 4
	// MaxKeyLen bounds a packed remote key in a descriptor (UCX's are tens to a few hundred
	// bytes, depending on the transports).
	MaxKeyLen = 4096
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Len returns the length of the buffer the descriptor names.
func (d Descriptor) Len() int { return int(d.n) }

// IsZero reports whether d is the zero Descriptor, which names nothing.
func (d Descriptor) IsZero() bool { return d.worker == 0 }

// Worker returns the id of the worker that registered the memory (Worker.ID).
func (d Descriptor) Worker() uint64 { return d.worker }

// Device reports whether the buffer is device (CUDA) memory.
func (d Descriptor) Device() bool { return d.memType == memCUDA }

// String returns a short account of the descriptor, for logs.
func (d Descriptor) String() string {
	if d.IsZero() {
		return "remote.Descriptor{}"
	}
	return fmt.Sprintf("remote.Descriptor{worker %016x region %d [%#x, +%d) buffer %#x +%d}", d.worker, d.region, d.base, d.size, d.addr, d.n)
}

// Slice returns the descriptor of n bytes of d's buffer from offset off: a Put or Get of part
// of a buffer. Out of the buffer, or n <= 0, is ErrOutOfRange.
func (d Descriptor) Slice(off, n int) (Descriptor, error) {
	if d.IsZero() {
		return Descriptor{}, fmt.Errorf("%w: the zero Descriptor", ErrDescriptor)
	}
	if off < 0 || n <= 0 || uint64(off) > d.n || uint64(n) > d.n-uint64(off) {
		return Descriptor{}, fmt.Errorf("%w: %d bytes at offset %d of a buffer of %d bytes", ErrOutOfRange, n, off, d.n)
	}
	d.addr += uint64(off)
	d.n = uint64(n)
	return d, nil
}

// EncodedLen returns the number of bytes AppendBinary appends.
func (d Descriptor) EncodedLen() int { return descHeader + len(d.rkey) + descTrailer }

// AppendBinary appends d's encoding to b.
func (d Descriptor) AppendBinary(b []byte) ([]byte, error) {
	if d.IsZero() {
		return b, fmt.Errorf("%w: the zero Descriptor", ErrDescriptor)
	}
	start := len(b)
	b = append(b, descMagic...)
	b = append(b, descVersion, d.memType)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(d.rkey)))
	b = binary.LittleEndian.AppendUint64(b, d.worker)
	b = binary.LittleEndian.AppendUint32(b, d.region)
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, v := range [...]uint64{d.base, d.size, d.addr, d.n} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = append(b, d.rkey...)
	return binary.LittleEndian.AppendUint32(b, crc32Checksum(b[start:])), nil
}

func crc32Checksum(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// MarshalBinary returns d's encoding.
func (d Descriptor) MarshalBinary() ([]byte, error) {
	return d.AppendBinary(make([]byte, 0, d.EncodedLen()))
}

// UnmarshalBinary sets d from b, which must hold exactly one encoded descriptor.
func (d *Descriptor) UnmarshalBinary(b []byte) error {
	v, rest, err := ParseDescriptor(b)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d bytes after the descriptor", ErrDescriptor, len(rest))
	}
	*d = v
	return nil
}

// ParseDescriptor reads the descriptor at the start of b and returns it with the bytes after
// it, so that a list of them is read in a loop. Every field is checked before it is used: the
// magic and version, the key's length against what b holds, the checksum, a non-empty
// region that does not wrap around, a non-empty buffer inside it, and the key laid out as UCX
// packs one, of the descriptor's memory type. Any failure wraps ErrDescriptor.
func ParseDescriptor(b []byte) (Descriptor, []byte, error) {
	if len(b) < descHeader+descTrailer {
		return Descriptor{}, b, fmt.Errorf("%w: %d bytes, fewer than the %d of a descriptor's fixed part", ErrDescriptor, len(b), descHeader+descTrailer)
	}
	if string(b[:4]) != descMagic {
		return Descriptor{}, b, fmt.Errorf("%w: not a descriptor (magic %q)", ErrDescriptor, b[:4])
	}
	if b[4] != descVersion {
		return Descriptor{}, b, fmt.Errorf("%w: version %d (this package reads %d)", ErrDescriptor, b[4], descVersion)
	}
	kl := int(binary.LittleEndian.Uint16(b[6:]))
	if kl == 0 || kl > MaxKeyLen {
		return Descriptor{}, b, fmt.Errorf("%w: remote key of %d bytes", ErrDescriptor, kl)
	}
	end := descHeader + kl
	if len(b) < end+descTrailer {
		return Descriptor{}, b, fmt.Errorf("%w: truncated: %d bytes, the descriptor needs %d", ErrDescriptor, len(b), end+descTrailer)
	}
	if got, want := binary.LittleEndian.Uint32(b[end:]), crc32Checksum(b[:end]); got != want {
		return Descriptor{}, b, fmt.Errorf("%w: checksum %08x, the bytes give %08x (corrupted)", ErrDescriptor, got, want)
	}
	d := Descriptor{
		memType: b[5],
		worker:  binary.LittleEndian.Uint64(b[8:]),
		region:  binary.LittleEndian.Uint32(b[16:]),
		base:    binary.LittleEndian.Uint64(b[24:]),
		size:    binary.LittleEndian.Uint64(b[32:]),
		addr:    binary.LittleEndian.Uint64(b[40:]),
		n:       binary.LittleEndian.Uint64(b[48:]),
		rkey:    string(b[descHeader:end]),
	}
	if err := d.check(binary.LittleEndian.Uint32(b[20:])); err != nil {
		return Descriptor{}, b, err
	}
	return d, b[end+descTrailer:], nil
}

// check validates a parsed descriptor's fields.
func (d Descriptor) check(reserved uint32) error {
	switch {
	case d.worker == 0:
		return fmt.Errorf("%w: worker id 0", ErrDescriptor)
	case d.memType != memHost && d.memType != memCUDA:
		return fmt.Errorf("%w: memory type %d", ErrDescriptor, d.memType)
	case reserved != 0:
		return fmt.Errorf("%w: reserved field %#x", ErrDescriptor, reserved)
	case d.size == 0 || d.base+d.size < d.base:
		return fmt.Errorf("%w: region [%#x, +%d)", ErrDescriptor, d.base, d.size)
	case d.n == 0 || d.n > 1<<62 || d.addr < d.base || d.addr+d.n < d.addr || d.addr+d.n > d.base+d.size:
		return fmt.Errorf("%w: buffer [%#x, +%d) outside its region [%#x, +%d)", ErrDescriptor, d.addr, d.n, d.base, d.size)
	}
	return checkRkey(d.rkey, d.memType)
}

// Packed remote key layout of UCX 1.13 (ucp_rkey_pack, src/ucp/core/ucp_rkey.c), in the
// host's byte order: the map of the memory domains it holds keys of (64 bits), the memory type
// of the memory (a byte, ucs_memory_type_t), then for each domain of the map, lowest first, a
// length byte and its key; then, where the memory's system device is known, the device and
// its distances.
const (
	rkeyMDMap   = 8
	rkeyMemType = rkeyMDMap
	rkeyFixed   = rkeyMDMap + 1
)

// checkRkey reports whether rkey is not laid out as UCX 1.13 packs a key of memory of type
// memType: ucp_ep_rkey_unpack reads one with no length, trusting its map and each key's length
// byte, and takes its memory type unchecked (ucp_rkey_proto_resolve, where UCX_PROTO_ENABLE is
// set, indexes the worker's per memory type endpoints by it). Registration.Describe packs the
// key of the region whose memory type the descriptor names, so a key of another memory type is
// forged. The map's bits name memory-domain indices below 64 (UCP_MAX_MDS) by construction;
// what follows the keys UCX 1.13 ignores here (it unpacks the rkey with no length).
func checkRkey(rkey string, memType uint8) error {
	if len(rkey) < rkeyFixed {
		return fmt.Errorf("%w: remote key of %d bytes (%d at least)", ErrDescriptor, len(rkey), rkeyFixed)
	}
	if mt := rkey[rkeyMemType]; mt != memType {
		return fmt.Errorf("%w: remote key of memory type %d in a descriptor of memory type %d", ErrDescriptor, mt, memType)
	}
	var mdMap [rkeyMDMap]byte
	copy(mdMap[:], rkey)
	p := rkeyFixed
	for m := binary.NativeEndian.Uint64(mdMap[:]); m != 0; m &= m - 1 {
		if p >= len(rkey) || int(rkey[p]) >= len(rkey)-p {
			return fmt.Errorf("%w: remote key truncated in memory domain %d's key (byte %d of %d)", ErrDescriptor, bits.TrailingZeros64(m), p, len(rkey))
		}
		p += 1 + int(rkey[p])
	}
	return nil
}

// Memory types of a descriptor (ucs_memory_type_t).
const (
	memHost = 0
	memCUDA = 1
)
