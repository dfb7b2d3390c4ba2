package ucx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// v1AddressAttr returns a version-1 worker address of one device with one transport, whose
// overhead, bandwidth and latency overhead are the floats given (its priority and flags 0).
func v1AddressAttr(overhead, bandwidth, latency float32) []byte {
	a := []byte{addrV1, 1, 2, 3, 4, 5, 6, 7, 8, 0, addrLast | 4, 127, 0, 0, 1, 0x34, 0x12}
	attr := make([]byte, addrAttrV1)
	binary.NativeEndian.PutUint32(attr[addrAttrV1Overhead:], math.Float32bits(overhead))
	binary.NativeEndian.PutUint32(attr[addrAttrV1Bandwidth:], math.Float32bits(bandwidth))
	binary.NativeEndian.PutUint32(attr[addrAttrV1Latency:], math.Float32bits(latency))
	a = append(a, attr...)
	return append(a, addrLast|2, 0x12, 0x34)
}

// TestCheckAddressAttrFloats: a transport's overhead, bandwidth or latency that is NaN or
// infinite, in either address version, or a version-1 overhead or latency below zero, is
// refused with ErrInvalid; what UCX writes (finite, not below zero), and a version-1 bandwidth
// below zero (UCX 1.11's, which UCX takes the absolute value of), is accepted. Before,
// CheckAddress read no attribute of a version-1 address and only the segment size of a
// version-2 one, and accepted all of these.
func TestCheckAddressAttrFloats(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, v := range [][3]float32{
		{nan, 1e9, 1e-7}, {-1, 1e9, 1e-7}, {-inf, 1e9, 1e-7}, {inf, 1e9, 1e-7},
		{1e-8, nan, 1e-7}, {1e-8, inf, 1e-7}, {1e-8, -inf, 1e-7},
		{1e-8, 1e9, nan}, {1e-8, 1e9, -1e-7}, {1e-8, 1e9, inf},
	} {
		if err := CheckAddress(v1AddressAttr(v[0], v[1], v[2])); !errors.Is(err, pinmalloc.ErrInvalid) {
			t.Fatalf("version 1, overhead %v, bandwidth %v, latency %v: %v, want ErrInvalid", v[0], v[1], v[2], err)
		}
	}
	for _, v := range [][3]float32{{1e-8, 1e9, 1e-7}, {0, 1e9, 0}, {1e-8, -1e9, 1e-7}, {0, 0, 0}, {float32(math.Copysign(0, -1)), 1, 0}} {
		if err := CheckAddress(v1AddressAttr(v[0], v[1], v[2])); err != nil {
			t.Fatalf("version 1, overhead %v, bandwidth %v, latency %v: %v", v[0], v[1], v[2], err)
		}
	}
	for i := range addrAttrV2Floats {
		for _, x := range []byte{0x0f, 0x1f, 0xff} { // Inf, NaN, NaN
			attr := v2Attr(1024, addrIfaceAMSync)
			attr[i] = x
			if err := CheckAddress(v2AddressAttr(0, attr, 0)); !errors.Is(err, pinmalloc.ErrInvalid) {
				t.Fatalf("version 2, byte %d of the attributes %#02x: %v, want ErrInvalid", i, x, err)
			}
		}
		for _, x := range []byte{0x00, 0x0e, 0xfe, 0x10} {
			attr := v2Attr(1024, addrIfaceAMSync)
			attr[i] = x
			if err := CheckAddress(v2AddressAttr(0, attr, 0)); err != nil {
				t.Fatalf("version 2, byte %d of the attributes %#02x: %v", i, x, err)
			}
		}
	}
}

// TestConnectAddressAttrNaN: ConnectAddress of this worker's own address, each transport's
// overhead or latency made NaN (or the overhead -1, in version 1), is refused with ErrInvalid
// before UCX sees it. Before, ucp_ep_create scored the transport below zero, or NaN, and ended
// the process ("select.c:294 Assertion `(score >= 0.0) || (rsc_index ==
// ((ucp_rsc_index_t)-1))' failed", SIGABRT): a Dial's hello carrying such an address ended the
// worker it dialed.
func TestConnectAddressAttrNaN(t *testing.T) {
	needUCX(t)
	nan := math.Float32bits(float32(math.NaN()))
	for _, env := range []map[string]string{{}, {"UCX_ADDRESS_VERSION": "v2"}} {
		a := ownAddress(t, env)
		for _, forge := range []struct {
			what string
			f    func(version byte, b []byte)
		}{
			{"overhead NaN", func(version byte, b []byte) {
				if version == addrV1 {
					binary.NativeEndian.PutUint32(b[addrAttrV1Overhead:], nan)
				} else {
					b[0] = 0x1f
				}
			}},
			{"latency NaN", func(version byte, b []byte) {
				if version == addrV1 {
					binary.NativeEndian.PutUint32(b[addrAttrV1Latency:], nan)
				} else {
					b[2] = 0x1f
				}
			}},
			{"overhead -1 (version 1)", func(version byte, b []byte) {
				if version == addrV1 {
					binary.NativeEndian.PutUint32(b[addrAttrV1Overhead:], math.Float32bits(-1))
				} else {
					b[0] = 0x1f
				}
			}},
		} {
			f := bytes.Clone(a)
			_ = walkAddress(f, func(version byte, b []byte, at int) error {
				forge.f(version, b)
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
					t.Fatalf("under %v, %s: endpoint %#x, %v, want ErrInvalid", env, forge.what, ep, err)
				}
			}()
		}
	}
}
