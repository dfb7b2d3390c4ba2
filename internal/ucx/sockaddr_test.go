package ucx

import (
	"encoding/binary"
	"testing"
)

// sa4 and sa6 build a struct sockaddr_in and sockaddr_in6 as the kernel writes them.
func sa4(ip [4]byte, port uint16) []byte {
	b := make([]byte, sockaddrIn)
	binary.NativeEndian.PutUint16(b, afInet)
	binary.BigEndian.PutUint16(b[2:], port)
	copy(b[4:], ip[:])
	return b
}

func sa6(ip [16]byte, port uint16, scope uint32) []byte {
	b := make([]byte, sockaddrIn6)
	binary.NativeEndian.PutUint16(b, afInet6)
	binary.BigEndian.PutUint16(b[2:], port)
	binary.NativeEndian.PutUint32(b[4:], 0xffffffff) // flowinfo: not printed
	copy(b[8:], ip[:])
	binary.NativeEndian.PutUint32(b[24:], scope)
	return b
}

// storage pads sa to a struct sockaddr_storage, as ConnRequestAddr gives it.
func storage(sa []byte) []byte { return append(sa, make([]byte, 128-len(sa))...) }

// TestSockaddrString formats the addresses of both families, and bytes that are none (a peer's
// description, so hostile): short for their family, of another family, empty. Each hostile
// slice is cut from a longer buffer of 0xff, so a read past its end would print those bytes.
func TestSockaddrString(t *testing.T) {
	ll := [16]byte{0xfe, 0x80, 15: 1}
	mapped := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: 5}
	unknown := make([]byte, 128)
	binary.NativeEndian.PutUint16(unknown, 1) // AF_UNIX
	swapped := make([]byte, sockaddrIn)
	binary.NativeEndian.PutUint16(swapped, afInet<<8) // AF_INET in the wrong byte order
	for _, tc := range []struct {
		name string
		sa   []byte
		want string
	}{
		{"ipv4", sa4([4]byte{10, 0, 0, 5}, 41234), "10.0.0.5:41234"},
		{"ipv4 storage", storage(sa4([4]byte{127, 0, 0, 1}, 1)), "127.0.0.1:1"},
		{"ipv4 port 0", sa4([4]byte{}, 0), "0.0.0.0:0"},
		{"ipv6 loopback", sa6([16]byte{15: 1}, 13337, 0), "[::1]:13337"},
		{"ipv6 scoped", storage(sa6(ll, 65535, 3)), "[fe80::1%3]:65535"},
		{"ipv4-mapped ipv6", sa6(mapped, 80, 0), "[::ffff:10.0.0.5]:80"},
		{"nil", nil, "short address (0 bytes)"},
		{"one byte", []byte{2}, "short address (1 bytes)"},
		{"ipv4 family only", sa4([4]byte{1, 2, 3, 4}, 5)[:2], "short IPv4 address (2 bytes)"},
		{"ipv4 no padding", sa4([4]byte{1, 2, 3, 4}, 5)[:8], "short IPv4 address (8 bytes)"},
		{"ipv4 one short", sa4([4]byte{1, 2, 3, 4}, 5)[:15], "short IPv4 address (15 bytes)"},
		{"ipv6 no scope", sa6(ll, 1, 0)[:24], "short IPv6 address (24 bytes)"},
		{"ipv6 one short", sa6(ll, 1, 0)[:27], "short IPv6 address (27 bytes)"},
		{"ipv6 ipv4-sized", sa6(ll, 1, 0)[:sockaddrIn], "short IPv6 address (16 bytes)"},
		{"unknown family", unknown, "address of unknown family 1"},
		{"family 0", make([]byte, 128), "address of unknown family 0"},
		{"family 0xffff", []byte{0xff, 0xff}, "address of unknown family 65535"},
		{"family swapped", swapped, "address of unknown family 512"},
	} {
		// A buffer of 0xff beyond the slice's end: a read past it prints them.
		buf := make([]byte, len(tc.sa)+64)
		for i := range buf {
			buf[i] = 0xff
		}
		copy(buf, tc.sa)
		if got := SockaddrString(buf[:len(tc.sa):len(tc.sa)]); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
