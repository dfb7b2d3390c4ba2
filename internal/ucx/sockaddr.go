package ucx

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
)

// Linux's address families, as a struct sockaddr's sa_family says them.
const (
	afInet  = 2
	afInet6 = 10
)

// Sizes of struct sockaddr_in and sockaddr_in6: an address of either family shorter than its
// struct is no address.
const (
	sockaddrIn  = 16
	sockaddrIn6 = 28
)

// SockaddrString formats sa, a struct sockaddr as bytes (ConnRequestAddr's: sa_family in this
// machine's byte order, then the port in network order), as "host:port" for IPv4 and
// "[host%scope]:port" for IPv6. The bytes describe a peer, so nothing in them is trusted: a
// family other than these two prints as "address of unknown family N", bytes shorter than
// their family's struct as "short address ...", and nothing past len(sa) is read.
func SockaddrString(sa []byte) string {
	if len(sa) < 2 {
		return fmt.Sprintf("short address (%d bytes)", len(sa))
	}
	switch family := binary.NativeEndian.Uint16(sa); family {
	case afInet:
		if len(sa) < sockaddrIn {
			return fmt.Sprintf("short IPv4 address (%d bytes)", len(sa))
		}
		ip := netip.AddrFrom4([4]byte(sa[4:8]))
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(sa[2:])).String()
	case afInet6:
		if len(sa) < sockaddrIn6 {
			return fmt.Sprintf("short IPv6 address (%d bytes)", len(sa))
		}
		ip := netip.AddrFrom16([16]byte(sa[8:24]))
		if scope := binary.NativeEndian.Uint32(sa[24:]); scope != 0 {
			ip = ip.WithZone(strconv.FormatUint(uint64(scope), 10))
		}
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(sa[2:])).String()
	default:
		return fmt.Sprintf("address of unknown family %d", family)
	}
}
