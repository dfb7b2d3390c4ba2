package ucx

import (
	"strings"
	"testing"
)

func TestParseMemunits(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"8192", 8192, true}, {"8k", 8 << 10, true}, {"64K", 64 << 10, true}, {"64kb", 64 << 10, true},
		{"1m", 1 << 20, true}, {"2MB", 2 << 20, true}, {"1g", 1 << 30, true}, {"16b", 16, true},
		{"inf", 0, false}, {"auto", 0, false}, {"", 0, false}, {"-1k", 0, false}, {"k", 0, false},
		{"99999999999g", 0, false},
	} {
		if n, ok := parseMemunits(c.in); n != c.n || ok != c.ok {
			t.Errorf("parseMemunits(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}

// The hint names the variables only when the receive segments come out smaller than the send
// segments, with UCX's defaults for what the environment leaves unset.
func TestTCPSegmentsHint(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == name {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	for _, c := range []struct {
		env  []string
		hint bool
	}{
		{nil, false},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "64k"}, false},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "128k"}, true}, // receive segments 64 KiB unset
		{[]string{"UCX_TCP_RX_SEG_SIZE", "8k"}, false},  // send segments 8 KiB unset
		{[]string{"UCX_TCP_RX_SEG_SIZE", "4k"}, true},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "64k", "UCX_TCP_RX_SEG_SIZE", "8k"}, true},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "inf", "UCX_TCP_RX_SEG_SIZE", "8k"}, false},
	} {
		h := tcpSegmentsHint(env(c.env...))
		if (h != "") != c.hint {
			t.Errorf("%v: hint %q, want one: %v", c.env, h, c.hint)
		}
		if h != "" && !strings.Contains(h, "UCX_TCP_RX_SEG_SIZE") {
			t.Errorf("%v: hint %q names no variable", c.env, h)
		}
	}
}
