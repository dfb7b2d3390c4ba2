package ucx

import (
	"fmt"
	"strconv"
	"strings"
)

// UCX's tcp transport sizes its segments by UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE (8 KiB
// and 64 KiB unset), and refuses to create a worker whose receive segments are smaller than
// its send segments, with no more than "Invalid parameter". tcpSegmentsHint says why, when
// that is the reason.
const (
	tcpTxDefault = 8 << 10
	tcpRxDefault = 64 << 10
)

// tcpSegmentsHint returns ", ..." naming the two variables when the environment sizes tcp's
// receive segments smaller than its send segments (what ucp_worker_create refuses), or "".
func tcpSegmentsHint(getenv func(string) (string, bool)) string {
	size := func(name string, def int64) (int64, string, bool) {
		v, set := getenv(name)
		if !set {
			return def, "unset", true
		}
		n, ok := parseMemunits(v)
		return n, v, ok
	}
	tx, txs, okTx := size("UCX_TCP_TX_SEG_SIZE", tcpTxDefault)
	rx, rxs, okRx := size("UCX_TCP_RX_SEG_SIZE", tcpRxDefault)
	if !okTx || !okRx || rx >= tx {
		return ""
	}
	return fmt.Sprintf(" (UCX_TCP_RX_SEG_SIZE %s is smaller than UCX_TCP_TX_SEG_SIZE %s: tcp's receive segments must hold its send segments)", rxs, txs)
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
