package ucx

import (
	"errors"
	"fmt"
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

// env returns a getenv of the variables kv names, NAME then value.
func env(kv ...string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := 0; i < len(kv); i += 2 {
			if kv[i] == name {
				return kv[i+1], true
			}
		}
		return "", false
	}
}

// The hint names the variables only when the receive segments come out smaller than the send
// segments, with UCX's defaults for what the environment leaves unset.
func TestTCPSegmentsHint(t *testing.T) {
	const tail = " is smaller than "
	for _, c := range []struct {
		env  []string
		hint string
	}{
		{nil, ""},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "64k"}, ""},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "128k"}, "UCX_TCP_RX_SEG_SIZE unset (64k)" + tail + "UCX_TCP_TX_SEG_SIZE 128k"},
		{[]string{"UCX_TCP_RX_SEG_SIZE", "8k"}, ""},
		{[]string{"UCX_TCP_RX_SEG_SIZE", "4k"}, "UCX_TCP_RX_SEG_SIZE 4k" + tail + "UCX_TCP_TX_SEG_SIZE unset (8k)"},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "64k", "UCX_TCP_RX_SEG_SIZE", "8k"}, "UCX_TCP_RX_SEG_SIZE 8k" + tail + "UCX_TCP_TX_SEG_SIZE 64k"},
		{[]string{"UCX_TCP_TX_SEG_SIZE", "inf", "UCX_TCP_RX_SEG_SIZE", "8k"}, ""},
	} {
		want := ""
		if c.hint != "" {
			want = " (" + c.hint + ": tcp's receive segments must hold its send segments)"
		}
		if h := tcpSegmentsHint(env(c.env...)); h != want {
			t.Errorf("%v: hint %q, want %q", c.env, h, want)
		}
	}
}

// ucp_init's "No such device" names the variables that chose the transports and devices, as
// the environment sets them; another status, or another error, has no hint.
func TestNoDeviceHint(t *testing.T) {
	for _, c := range []struct {
		err  error
		env  []string
		want string
	}{
		{Status(statusNoDevice), nil, "UCX found no transport it can use on this host"},
		{Status(statusNoDevice), []string{"UCX_TLS", "rc"}, `no transport or device that UCX_TLS="rc" names`},
		{fmt.Errorf("wrapped: %w", Status(statusNoDevice)), []string{"UCX_TLS", "rc", "UCX_NET_DEVICES", "mlx5_0:1"},
			`UCX_TLS="rc" and UCX_NET_DEVICES="mlx5_0:1" names`},
		{Status(-5), []string{"UCX_TLS", "rc"}, ""},
		{errors.New("other"), []string{"UCX_TLS", "rc"}, ""},
	} {
		h := noDeviceHint(c.err, env(c.env...))
		if c.want == "" && h != "" || !strings.Contains(h, c.want) {
			t.Errorf("%v with %v: hint %q, want one with %q", c.err, c.env, h, c.want)
		}
	}
}
