package ucx

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Hints for UCX's refusals of the configuration the environment gives it. UCX returns no more
// than a status ("No such device", "Invalid parameter"); its own log line, on stderr where a
// program keeps it, says why. A hint names the variables, for the error itself.

// noDeviceHint returns " (...)" naming UCX_TLS and UCX_NET_DEVICES as the environment sets them
// when err says that ucp_init found no transport to use (UCS_ERR_NO_DEVICE), or "".
func noDeviceHint(err error, getenv func(string) (string, bool)) string {
	var s Status
	if !errors.As(err, &s) || s != statusNoDevice {
		return ""
	}
	var set []string
	for _, name := range []string{"UCX_TLS", "UCX_NET_DEVICES"} {
		if v, ok := getenv(name); ok {
			set = append(set, fmt.Sprintf("%s=%q", name, v))
		}
	}
	if len(set) == 0 {
		return " (UCX found no transport it can use on this host: ucx_info -d lists what it has)"
	}
	return fmt.Sprintf(" (no transport or device that %s names is available on this host: "+
		"ucx_info -d lists what it has)", strings.Join(set, " and "))
}

// UCX's tcp transport sizes its segments by UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE (8 KiB
// and 64 KiB unset), and ucp_worker_create refuses a worker whose receive segments are smaller
// than its send segments.
const (
	tcpTxDefault = 8 << 10
	tcpRxDefault = 64 << 10
)

// tcpSegmentsHint returns " (...)" naming the two variables when the environment makes tcp's
// receive segments smaller than its send segments, or "".
func tcpSegmentsHint(getenv func(string) (string, bool)) string {
	size := func(name string, def int64) (int64, string, bool) {
		v, set := getenv(name)
		if !set {
			return def, fmt.Sprintf("%s unset (%dk)", name, def>>10), true
		}
		n, ok := parseMemunits(v)
		return n, name + " " + v, ok
	}
	tx, txs, okTx := size("UCX_TCP_TX_SEG_SIZE", tcpTxDefault)
	rx, rxs, okRx := size("UCX_TCP_RX_SEG_SIZE", tcpRxDefault)
	if !okTx || !okRx || rx >= tx {
		return ""
	}
	return fmt.Sprintf(" (%s is smaller than %s: tcp's receive segments must hold its send segments)", rxs, txs)
}

// parseMemunits parses a size as UCX writes one: a number with an optional unit (b, k, kb, m,
// mb, g, gb, in either case); false for anything else ("inf", "auto", garbage).
func parseMemunits(s string) (int64, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(s, "b")
	shift := 0
	switch {
	case strings.HasSuffix(s, "k"):
		shift = 10
	case strings.HasSuffix(s, "m"):
		shift = 20
	case strings.HasSuffix(s, "g"):
		shift = 30
	}
	if shift > 0 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<40>>shift {
		return 0, false
	}
	return n << shift, true
}
