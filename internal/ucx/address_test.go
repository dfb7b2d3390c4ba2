package ucx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// ownAddress returns the address of a worker made under env (UCX reads it when the context is
// made); the environment is as it was after.
func ownAddress(tb testing.TB, env map[string]string) []byte {
	tb.Helper()
	for k, v := range env {
		old, had := os.LookupEnv(k)
		_ = os.Setenv(k, v)
		defer func() {
			if had {
				_ = os.Setenv(k, old)
			} else {
				_ = os.Unsetenv(k)
			}
		}()
	}
	c, err := NewContext("address-test")
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	w, err := c.NewWorker(8, 1<<16)
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Destroy()
	a, err := w.Address()
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// addressConfigs are UCX configurations whose workers' addresses CheckAddress must accept:
// both address versions, the debug information (the worker's name), TCP and shared memory.
var addressConfigs = []map[string]string{
	{},
	{"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"},
	{"UCX_TLS": "sm"},
	{"UCX_ADDRESS_VERSION": "v2"},
	{"UCX_ADDRESS_VERSION": "v2", "UCX_TLS": "sm"},
	{"UCX_ADDRESS_DEBUG_INFO": "y"},
	{"UCX_ADDRESS_DEBUG_INFO": "y", "UCX_ADDRESS_VERSION": "v2"},
}

// TestCheckAddress: every address UCX 1.13 gives a worker is accepted; every proper prefix of
// one (a truncated address, which ucp_ep_create reads past its end), one with a byte after it,
// and one naming an address version other than 1 or 2 (on which UCX aborts the process) are
// refused with UCS_ERR_INVALID_ADDR (pinmalloc.ErrInvalid).
func TestCheckAddress(t *testing.T) {
	needUCX(t)
	for _, env := range addressConfigs {
		a := ownAddress(t, env)
		if err := CheckAddress(a); err != nil {
			t.Fatalf("the address of a worker under %v (%d bytes, % x): %v", env, len(a), a, err)
		}
		for n := range len(a) {
			if err := CheckAddress(a[:n]); !errors.Is(err, pinmalloc.ErrInvalid) {
				t.Fatalf("under %v, the first %d bytes of an address of %d: %v, want ErrInvalid", env, n, len(a), err)
			}
		}
		if err := CheckAddress(append(bytes.Clone(a), 0)); !errors.Is(err, pinmalloc.ErrInvalid) {
			t.Fatalf("under %v, an address with a byte after its end: %v, want ErrInvalid", env, err)
		}
		for v := byte(2); v < 16; v++ {
			b := bytes.Clone(a)
			b[0] = b[0]&0xf0 | v
			if err := CheckAddress(b); !errors.Is(err, pinmalloc.ErrInvalid) {
				t.Fatalf("under %v, an address of version %d: %v, want ErrInvalid", env, v+1, err)
			}
		}
		t.Logf("%v: %d bytes", env, len(a))
	}
}

// FuzzCheckAddress: CheckAddress never panics, accepts nothing beyond MaxAddressLen, and the
// grammar it checks delimits itself: no proper prefix of an address it accepts is accepted.
func FuzzCheckAddress(f *testing.F) {
	if Load() == nil {
		for _, env := range addressConfigs {
			f.Add(ownAddress(f, env))
		}
	}
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0xff})
	f.Add([]byte{0x20, 1, 2, 3, 4, 5, 6, 7, 8, 0xff})
	f.Add(v2Address(0, 5))
	f.Add(v2Address(0, 0x7f, 200)) // a memory domain beyond UCP_MAX_MDS (TestCheckAddressMDIndex)
	f.Add(v2Address(maxResources, 0))
	f.Add(v2AddressAttr(0, v2Attr(0, addrIfaceAMSync), 0)) // an active message segment of 0 bytes (TestCheckAddressSegSize)
	f.Add(v2AddressAttr(0, v2Attr(minSegSize/addrSegSizeFactor, addrIfaceAMSync), 0))
	f.Add(v1AddressAttr(float32(math.NaN()), 1e9, 1e-7)) // a NaN overhead (TestCheckAddressAttrFloats)
	f.Fuzz(func(t *testing.T, a []byte) {
		if CheckAddress(a) != nil {
			return
		}
		if len(a) > MaxAddressLen {
			t.Fatalf("accepted %d bytes", len(a))
		}
		for n := range len(a) {
			if CheckAddress(a[:n]) == nil {
				t.Fatalf("accepted % x and its first %d bytes", a, n)
			}
		}
	})
}

// v2Address returns a version-2 worker address (its uuid only in the header) of devices
// devices without transports, then one with a transport, whose memory-domain index is md (one
// byte, or two where the first is 0x7f, the extension).
func v2Address(devices int, md ...byte) []byte {
	return v2AddressAttr(devices, make([]byte, addrAttrV2), md...)
}

// v2AddressAttr is v2Address with its transport's attributes attr (addrAttrV2 bytes).
func v2AddressAttr(devices int, attr []byte, md ...byte) []byte {
	a := []byte{addrV2, addrFlagUUID, 1, 2, 3, 4, 5, 6, 7, 8}
	for range devices {
		a = append(a, addrMDEmpty, 0) // no transport, no device address
	}
	a = append(a, md...)
	a = append(a, addrLast|4, 127, 0, 0, 1) // the last device: 4 bytes of address
	a = append(a, 0x34, 0x12)               // a transport's name checksum
	a = append(a, attr...)
	return append(a, addrLast|2, 0x12, 0x34) // the last transport: 2 bytes of address
}

// TestCheckAddressMDIndex: a device's memory-domain index at or beyond UCP_MAX_MDS (64) is
// refused: UCX 1.13 takes it unchecked (up to 126 in a version-2 address, 255 with its
// extension byte) and indexes a 64-entry array on the stack by it (ucp_wireup_get_reachable_mds,
// ae_cmpts) and shifts 64-bit maps by it, where CheckAddress accepted any. So is an address of
// more than UCP_MAX_RESOURCES (128) devices: UCX counts a device's use in an array of 128 on the
// stack indexed by the device's number, a byte (ucp_wireup_add_bw_lanes).
func TestCheckAddressMDIndex(t *testing.T) {
	for _, md := range [][]byte{{0}, {5}, {63}, {0x7f, 0}, {0x7f, 63}} {
		if a := v2Address(0, md...); CheckAddress(a) != nil {
			t.Fatalf("memory domain %v: %v (% x)", md, CheckAddress(a), a)
		}
	}
	for _, md := range [][]byte{{64}, {126}, {0x7f, 64}, {0x7f, 200}, {0x7f, 255}} {
		if err := CheckAddress(v2Address(0, md...)); !errors.Is(err, pinmalloc.ErrInvalid) {
			t.Fatalf("memory domain %v: %v, want ErrInvalid", md, err)
		}
	}
	empty := []byte{addrV2, addrFlagUUID, 1, 2, 3, 4, 5, 6, 7, 8, addrMDEmpty | 64, addrLast} // one device, without transports
	if err := CheckAddress(empty); !errors.Is(err, pinmalloc.ErrInvalid) {
		t.Fatalf("memory domain 64 of a device without transports: %v, want ErrInvalid", err)
	}
	if err := CheckAddress(append(empty[:10:10], addrMDEmpty|63, addrLast)); err != nil {
		t.Fatalf("memory domain 63 of a device without transports: %v", err)
	}
	if err := CheckAddress(v2Address(maxResources-1, 0)); err != nil {
		t.Fatalf("%d devices: %v", maxResources, err)
	}
	if err := CheckAddress(v2Address(maxResources, 0)); !errors.Is(err, pinmalloc.ErrInvalid) {
		t.Fatalf("%d devices: %v, want ErrInvalid", maxResources+1, err)
	}
}

// v2Attr returns a version-2 transport's attributes: segment size seg (in units of
// addrSegSizeFactor bytes), flags flags, a bandwidth (UCX refuses 0) and the rest 0.
func v2Attr(seg, flags uint16) []byte {
	b := make([]byte, addrAttrV2)
	b[1] = 0x80
	binary.NativeEndian.PutUint16(b[addrAttrSegSize:], seg)
	binary.NativeEndian.PutUint16(b[addrAttrFlags:], flags)
	return b
}

// TestCheckAddressSegSize: a version-2 transport that receives active messages
// (UCP_ADDR_IFACE_FLAG_AM_SYNC) with a segment size under minSegSize (512 bytes) is refused:
// UCX 1.13 takes it unchecked as the most its active message lanes to the peer send in one
// fragment, and aborts ucp_ep_create on 0, the first large or rendezvous message on 64
// (TestConnectAddressSegSize). Before, CheckAddress did not read transports' attributes and
// accepted any. A segment size of 0 without the flag is what UCX writes for a transport with
// no active messages (cma), and is accepted.
func TestCheckAddressSegSize(t *testing.T) {
	for _, seg := range []uint16{0, 1, minSegSize/addrSegSizeFactor - 1} {
		for _, flags := range []uint16{addrIfaceAMSync, 0xffff} {
			if err := CheckAddress(v2AddressAttr(0, v2Attr(seg, flags), 0)); !errors.Is(err, pinmalloc.ErrInvalid) {
				t.Fatalf("segments of %d bytes, flags %#x: %v, want ErrInvalid", int(seg)*addrSegSizeFactor, flags, err)
			}
		}
	}
	for _, c := range [][2]uint16{
		{minSegSize / addrSegSizeFactor, addrIfaceAMSync},
		{128, 0x1b},  // shared memory's 8 KiB (posix, sysv, self)
		{1024, 0x8b}, // tcp's 64 KiB (Load's UCX_TCP_TX_SEG_SIZE)
		{0xffff, 0xffff},
		{0, 0x99}, // cma: no active messages
		{0, 0xffff &^ addrIfaceAMSync},
	} {
		if err := CheckAddress(v2AddressAttr(0, v2Attr(c[0], c[1]), 0)); err != nil {
			t.Fatalf("segments of %d bytes, flags %#x: %v", int(c[0])*addrSegSizeFactor, c[1], err)
		}
	}
	// Behind other devices and transports, and in a version-1 address (which carries no
	// segment size: its attributes are other fields, TestCheckAddressAttrFloats).
	a := v2AddressAttr(5, v2Attr(0, addrIfaceAMSync), 3)
	if err := CheckAddress(a); !errors.Is(err, pinmalloc.ErrInvalid) {
		t.Fatalf("behind 5 devices: %v, want ErrInvalid", err)
	}
	v1 := []byte{addrV1, 1, 2, 3, 4, 5, 6, 7, 8, 0, addrLast | 4, 127, 0, 0, 1, 0x34, 0x12}
	v1 = append(v1, make([]byte, addrAttrV1)...)
	v1 = append(v1, addrLast|2, 0x12, 0x34)
	if err := CheckAddress(v1); err != nil {
		t.Fatalf("a version-1 address with attributes all 0: %v", err)
	}
}

// TestConnectAddressSegSize: ConnectAddress of this worker's own version-2 address with the
// segment size of each transport that receives active messages made 0 (or 64 bytes) is refused
// with ErrInvalid, before UCX sees it. Before, with 0, ucp_ep_create ended the process
// ("ucp_ep.c:2634 Assertion `config->rndv.rkey_size <= config->am.max_bcopy' failed: rkey_size
// 9, am.max_bcopy 0", SIGABRT); with 64 it made the endpoint, and the first data message of
// 100,000 bytes ended the process (an assertion on the wrapped fragment offset, or, sent for a
// rendezvous, "Fatal: RTS is too big 114, max 64").
func TestConnectAddressSegSize(t *testing.T) {
	needUCX(t)
	for _, env := range addressConfigs {
		if env["UCX_ADDRESS_VERSION"] != "v2" {
			continue
		}
		a := ownAddress(t, env)
		am := 0
		_ = walkAddress(a, func(version byte, b []byte, at int) error {
			if binary.NativeEndian.Uint16(b[addrAttrFlags:])&addrIfaceAMSync != 0 {
				am++
			}
			return nil
		})
		if am == 0 {
			t.Fatalf("under %v, no transport receives active messages (% x)", env, a)
		}
		for _, seg := range []uint16{0, 1} {
			f := bytes.Clone(a)
			_ = walkAddress(f, func(version byte, b []byte, at int) error {
				if binary.NativeEndian.Uint16(b[addrAttrFlags:])&addrIfaceAMSync != 0 {
					binary.NativeEndian.PutUint16(b[addrAttrSegSize:], seg)
				}
				return nil
			})
			func() {
				c, err := NewContext("address-test")
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				w, err := c.NewWorker(8, 1<<16)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Destroy()
				if ep, err := w.ConnectAddress(f); !errors.Is(err, pinmalloc.ErrInvalid) {
					t.Fatalf("under %v, segments of %d bytes: endpoint %#x, %v, want ErrInvalid", env, int(seg)*addrSegSizeFactor, ep, err)
				}
			}()
		}
	}
}
