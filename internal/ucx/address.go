package ucx

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Checking a peer's worker address.
//
// ucp_ep_create reads a worker address (ucp_address_unpack) with no length: every count and
// length in it is trusted, so a truncated or forged one is read past its end, and one whose
// header names an address version other than 1 or 2 ends the process (ucs_assertv_always). So
// CheckAddress walks an address as UCX 1.13's ucp_address_unpack does for ucp_ep_create (its
// default unpack flags: the worker's uuid and name, device, interface and endpoint addresses),
// bounded by the bytes given, and ConnectAddress refuses any address it does not accept.
//
// The layout (src/ucp/wireup/address.c of UCX 1.13.1): a header (v1: one byte, the version in
// its low 4 bits, flags in its high 4; v2: the version byte, then a flags byte); the worker's
// uuid (8 bytes: always in v1, where its flag says in v2), a client id (8, where its flag says),
// the worker's name (a length byte and the bytes, where the debug-info flag says); then either
// the byte 0xff (no device) or devices, each: a memory-domain byte (flag 0x80: no transport;
// index in the rest, extended by a second byte in v2 where all index bits are set), a device
// address length byte (0x80: last device, 0x40: a number of paths byte follows, 0x20: a system
// device byte follows; the length in the low 5 bits, extended in v2 where they are all set), the
// device address, and, unless the device is empty, its transports, each: a 2-byte name
// checksum, the interface's attributes (16 bytes in v1, 8 in v2), an interface address length
// byte (0x80: last transport, 0x40: endpoint addresses follow; the length in the low 6 bits,
// extended in v2 where they are all set), and the interface address.
//
// Beyond UCX's own reading, CheckAddress refuses what ucp_worker_get_address never writes and
// UCX would act on: endpoint addresses (ucp_worker_get_address packs none, and their lane
// indexes name lanes of an endpoint not yet made), more transports than UCP_MAX_RESOURCES, header
// flags UCX 1.13 does not define, bytes after the last device, and an address beyond
// MaxAddressLen; and what UCX 1.13 takes unchecked and then indexes memory by: a device's
// memory-domain index of UCP_MAX_MDS (64) or more (up to 126 in a version-2 address, 255 with
// its extension byte), by which ucp_ep_create's lane selection indexes a 64-entry array on the
// stack (ucp_wireup_get_reachable_mds) and shifts 64-bit maps; and more than UCP_MAX_RESOURCES
// devices, whose number (a byte, counting devices without transports too) indexes an array of
// that many on the stack (ucp_wireup_add_bw_lanes).
//
// And, in a version-2 address, a transport that receives active messages (its attributes'
// flag UCP_ADDR_IFACE_FLAG_AM_SYNC, which UCX requires of the peer's interface of an active
// message lane) whose segment size (its attributes' seg_size: what the peer receives in one
// fragment) is under minSegSize. UCX takes it unchecked as the most the endpoint's active
// message lanes send by copy or zero copy in one fragment (ucp_ep_config_init_attrs,
// ucp_ep_get_max_bcopy: the least of it and this side's own interface's), with no floor, and
// then breaks on it: 0 ends ucp_ep_create (ucs_assertv_always: the endpoint's packed remote
// key, 9 bytes at least, must fit in it); 64, the least above 0, ends the process on the first
// message too large to go in one fragment (its first fragment of 64 bytes cannot hold the
// message's 64-byte header: UCX's fragment offset wraps, an assertion in Debian's build and a
// copy out of bounds in one without) or in a rendezvous (ucs_fatal "RTS is too big": a
// rendezvous request, about 40 bytes of UCX's header, the packed remote key of the
// endpoint's bandwidth lanes and the message's header, must fit in one fragment). UCX's own
// floor for an active message lane is UCP_MIN_BCOPY (64), which it checks on its own interface
// only, and it writes an interface's seg_size as its max_bcopy over 64, rounded down: 8 KiB
// and more for tcp, shared memory, self and rc; an MTU less headers for ud (960 bytes at an
// MTU of 1024, the least RoCE gives). minSegSize, 512, holds a rendezvous request with a
// remote key of some 400 bytes (9, and 1 and the key's bytes per memory domain of the
// bandwidth lanes: 8 bytes for an InfiniBand one, about 100 for cuda_ipc) and refuses no
// transport of UCX's at an MTU of 1024 or more. A transport that receives no active messages
// writes 0 (cma, cuda_copy: ucp_address_iface_seg_size), which UCX never takes for a lane that
// sends them. Version 1 carries no segment size (UCX takes it as unbounded).
//
// And a transport's overhead, bandwidth or latency that is not a finite number, or, in a
// version-1 address, an overhead or latency below zero. Version 1 carries them as floats
// (ucp_address_packed_iface_attr_t: overhead, bandwidth, latency overhead, in seconds and bytes
// a second), version 2 as UCX's 8-bit floats (ucs_fp8_t: 4 bits of exponent, the low ones, and
// 4 of mantissa), whose exponent 15 is NaN (Inf with a mantissa of 0) and which no finite value
// packs to. UCX refuses a bandwidth of 0 or less (after taking a negative one's absolute value,
// as UCX 1.11 and older wrote it: accepted here too) and takes the rest unchecked: its lane
// selection scores each transport as 1e-3 over the sum of the latencies and overheads of both
// sides, and asserts that a score is not below 0 (select.c: "Assertion `(score >= 0.0) ...'
// failed", Debian's build), which a NaN, or an overhead of -1, fails: ucp_ep_create ended the
// process (TestConnectAddressAttrNaN). UCX writes them from its interfaces' own attributes,
// finite and not below zero.
//
// In UCX's unified mode (UCX_UNIFIED_MODE) transports carry no lengths (the receiver takes them
// from its own interfaces), so no address can be checked: the worker finds so when its own
// address does not pass, and ConnectAddress then refuses every address.

// MaxAddressLen bounds a worker address a peer gives (UCX's are a few hundred bytes: ucx_info
// -a; at most UCP_MAX_RESOURCES transports of a few dozen bytes each).
const MaxAddressLen = 32 << 10

// Address layout constants of UCX 1.13 (src/ucp/wireup/address.c, src/ucp/core/ucp_types.h).
const (
	addrV1            = 0 // UCP_OBJECT_VERSION_V1
	addrV2            = 1 // UCP_OBJECT_VERSION_V2
	addrFlagDebugInfo = 1 << 0
	addrFlagUUID      = 1 << 1
	addrFlagClientID  = 1 << 2
	addrFlagAMOnly    = 1 << 3
	addrFlagsKnown    = addrFlagDebugInfo | addrFlagUUID | addrFlagClientID | addrFlagAMOnly
	addrNullResource  = 0xff
	addrLast          = 0x80 // last device (its length byte), last transport (its length byte)
	addrMDEmpty       = 0x80 // a device without transports (its memory-domain byte)
	addrNumPaths      = 0x40 // a device's length byte: a number of paths follows
	addrSysDevice     = 0x20 // a device's length byte: a system device follows
	addrHasEpAddr     = 0x40 // a transport's length byte: endpoint addresses follow
	addrDevLenMask    = 0x1f
	addrIfaceLenMask  = 0x3f
	addrMDMaskV1      = 0x1f
	addrMDMaskV2      = 0x7f
	addrAttrV1        = 16  // ucp_address_packed_iface_attr_t
	addrAttrV2        = 8   // ucp_address_v2_packed_iface_attr_t
	maxResources      = 128 // UCP_MAX_RESOURCES
	maxMDs            = 64  // UCP_MAX_MDS: min(UCP_MD_INDEX_BITS, UCP_MAX_RESOURCES)
	// A version-2 transport's attributes (ucp_address_v2_packed_iface_attr_t, in the host's
	// byte order): its segment size at byte 4, 16 bits counting units of
	// UCP_ADDRESS_IFACE_SEG_SIZE_FACTOR bytes, and its flags at byte 6, UCP_ADDR_IFACE_FLAG_*.
	addrAttrSegSize   = 4
	addrAttrFlags     = 6
	addrSegSizeFactor = 64     // UCP_ADDRESS_IFACE_SEG_SIZE_FACTOR
	addrIfaceAMSync   = 1 << 1 // UCP_ADDR_IFACE_FLAG_AM_SYNC
	// A version-2 transport's overhead, bandwidth and latency: bytes 0, 1 and 2, each a
	// ucs_fp8_t whose low 4 bits are its exponent; addrFP8NaN is the exponent of NaN and Inf.
	addrAttrV2Floats = 3
	addrFP8Exponent  = 0x0f
	addrFP8NaN       = 0x0f
	// A version-1 transport's overhead, bandwidth and latency overhead: floats at bytes 0, 4
	// and 8 (ucp_address_packed_iface_attr_t, in the host's byte order).
	addrAttrV1Overhead  = 0
	addrAttrV1Bandwidth = 4
	addrAttrV1Latency   = 8
	// minSegSize is the least segment size CheckAddress accepts of a version-2 transport that
	// receives active messages (the package doc of CheckAddress).
	minSegSize = 512
)

// CheckAddress reports, with an error wrapping Status(-7) (UCS_ERR_INVALID_ADDR), whether
// addr is not a worker address as UCX 1.13 writes one (Worker.Address) and reads one in
// ucp_ep_create: every length and count in it within its bytes, nothing after its end. It
// allocates nothing.
func CheckAddress(addr []byte) error { return walkAddress(addr, checkIfaceAttr) }

// walkAddress checks addr as CheckAddress says, calling attr with each transport's interface
// attributes (addrAttrV1 or addrAttrV2 bytes, by version) as it meets them: an error attr
// returns ends the walk with it.
func walkAddress(addr []byte, attr func(version byte, b []byte, at int) error) error {
	if len(addr) == 0 || len(addr) > MaxAddressLen {
		return addrErr("%d bytes (1 to %d)", len(addr), MaxAddressLen)
	}
	p := 0
	// next returns the byte at p and moves past it; ok is false past the end.
	next := func() (byte, bool) {
		if p >= len(addr) {
			return 0, false
		}
		p++
		return addr[p-1], true
	}
	skip := func(n int) bool {
		if n > len(addr)-p {
			return false
		}
		p += n
		return true
	}
	truncated := func(what string) error { return addrErr("truncated in %s at byte %d of %d", what, p, len(addr)) }

	h, _ := next()
	version, flags := h&0x0f, h>>4
	switch version {
	case addrV1:
	case addrV2:
		var ok bool
		if flags != 0 {
			return addrErr("version 2 header with bits %#x in its first byte", flags)
		}
		if flags, ok = next(); !ok {
			return truncated("the header")
		}
	default:
		return addrErr("address version %d (UCX 1.13 reads 1 and 2, and aborts on another)", version+1)
	}
	if flags&^addrFlagsKnown != 0 {
		return addrErr("header flags %#x", flags)
	}
	if version == addrV1 || flags&addrFlagUUID != 0 {
		if !skip(8) {
			return truncated("the worker's uuid")
		}
	}
	if flags&addrFlagClientID != 0 && !skip(8) {
		return truncated("the client id")
	}
	if flags&addrFlagDebugInfo != 0 {
		n, ok := next()
		if !ok || !skip(int(n)) {
			return truncated("the worker's name")
		}
	}
	if p < len(addr) && addr[p] == addrNullResource {
		p++
	} else {
		mdMask := byte(addrMDMaskV1)
		if version == addrV2 {
			mdMask = addrMDMaskV2
		}
		// extended reads the rest of a value of mask's bits in b: in v2, all set means the
		// value is the next byte.
		extended := func(b, mask byte) (int, bool) {
			v := b & mask
			if version == addrV2 && v == mask {
				x, ok := next()
				return int(x), ok
			}
			return int(v), true
		}
		transports, devices := 0, 0
		for last := false; !last; {
			if devices++; devices > maxResources {
				return addrErr("more than %d devices", maxResources)
			}
			md, ok := next()
			if !ok {
				return truncated("a device's memory domain")
			}
			mdIndex, ok := extended(md, mdMask)
			if !ok {
				return truncated("a device's memory domain")
			}
			if mdIndex >= maxMDs {
				return addrErr("memory domain %d at byte %d (UCX has %d at most)", mdIndex, p-1, maxMDs)
			}
			dl, ok := next()
			if !ok {
				return truncated("a device's address length")
			}
			last = dl&addrLast != 0
			n, ok := extended(dl, addrDevLenMask)
			if !ok {
				return truncated("a device's address length")
			}
			if dl&addrNumPaths != 0 && !skip(1) {
				return truncated("a device's number of paths")
			}
			if dl&addrSysDevice != 0 && !skip(1) {
				return truncated("a device's system device")
			}
			if !skip(n) {
				return truncated("a device's address")
			}
			attrLen := addrAttrV1
			if version == addrV2 {
				attrLen = addrAttrV2
			}
			for lastTL := md&addrMDEmpty != 0; !lastTL; {
				if transports++; transports > maxResources {
					return addrErr("more than %d transports", maxResources)
				}
				if !skip(2 + attrLen) {
					return truncated("a transport's name and attributes")
				}
				if err := attr(version, addr[p-attrLen:p], p-attrLen); err != nil {
					return err
				}
				il, ok := next()
				if !ok {
					return truncated("a transport's address length")
				}
				lastTL = il&addrLast != 0
				if il&addrHasEpAddr != 0 {
					return addrErr("an endpoint address at byte %d: a worker's address carries none", p-1)
				}
				n, ok := extended(il, addrIfaceLenMask)
				if !ok || !skip(n) {
					return truncated("a transport's address")
				}
			}
		}
	}
	if p != len(addr) {
		return addrErr("%d bytes after its end (byte %d)", len(addr)-p, p)
	}
	return nil
}

// checkIfaceAttr refuses a transport's attributes UCX 1.13 would act on unchecked (walkAddress):
// an overhead, bandwidth or latency that is not a finite number, a version-1 overhead or
// latency below zero, and, in a version-2 address, a segment size under minSegSize on a
// transport that receives active messages.
func checkIfaceAttr(version byte, b []byte, at int) error {
	if version == addrV1 {
		for _, f := range [...]struct {
			off      int
			name     string
			negative bool // taken by UCX below zero (a bandwidth: its absolute value)
		}{{addrAttrV1Overhead, "overhead", false}, {addrAttrV1Bandwidth, "bandwidth", true}, {addrAttrV1Latency, "latency", false}} {
			v := math.Float32frombits(binary.NativeEndian.Uint32(b[f.off:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v < 0 && !f.negative {
				return addrErr("a transport's %s of %v at byte %d", f.name, v, at+f.off)
			}
		}
		return nil
	}
	for i, name := range [addrAttrV2Floats]string{"overhead", "bandwidth", "latency"} {
		if b[i]&addrFP8Exponent == addrFP8NaN {
			return addrErr("a transport's %s of NaN or Inf (%#02x) at byte %d", name, b[i], at+i)
		}
	}
	if binary.NativeEndian.Uint16(b[addrAttrFlags:])&addrIfaceAMSync == 0 {
		return nil
	}
	if seg := int(binary.NativeEndian.Uint16(b[addrAttrSegSize:])) * addrSegSizeFactor; seg < minSegSize {
		return addrErr("a transport receiving active messages in segments of %d bytes at byte %d (%d at least)", seg, at+addrAttrSegSize, minSegSize)
	}
	return nil
}

func addrErr(format string, args ...any) error {
	return fmt.Errorf("ucx: not a worker address: %s: %w", fmt.Sprintf(format, args...), Status(-7))
}
