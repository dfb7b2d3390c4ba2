package remote

import (
	"fmt"
	"strings"
	"testing"
)

// TestNamesDoNotShowConnIDs checks that a connection's name, on either side, tells two
// connections apart without showing the id a peer's messages name to reach it.
func TestNamesDoNotShowConnIDs(t *testing.T) {
	seen := map[uint32]bool{}
	for i := range 1000 {
		id := randomID()
		g := greeting{conn: id, worker: uint64(i), pid: 1, host: hostID()}
		name := dialerName(g)
		for _, shown := range []string{fmt.Sprintf("%016x", id), fmt.Sprintf("%x", id), fmt.Sprint(id),
			fmt.Sprintf("%08x", uint32(id)), fmt.Sprintf("%08x", uint32(id>>32))} {
			if strings.Contains(name, shown) {
				t.Fatalf("%q shows the connection's id %016x", name, id)
			}
		}
		seen[connTag(id)] = true
	}
	if len(seen) < 999 {
		t.Fatalf("1000 ids gave %d tags", len(seen))
	}
}
