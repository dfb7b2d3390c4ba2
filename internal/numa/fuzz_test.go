package numa

import "testing"

// FuzzParseNodeList checks that any text read as a node list gives nodes that ascend strictly
// within [0, MaxNodes), or is refused, without a panic.
func FuzzParseNodeList(f *testing.F) {
	for _, s := range []string{
		"0\n", "0-1,3\n", "0-1023", "1-0", "0-3,2", "-1", "0-99999999999999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nodes, ok := parseNodeList(s)
		if !ok {
			return
		}
		if len(nodes) == 0 || len(nodes) > MaxNodes {
			t.Fatalf("%q: %d nodes", s, len(nodes))
		}
		for i, n := range nodes {
			if n < 0 || n >= MaxNodes || i > 0 && n <= nodes[i-1] {
				t.Fatalf("%q: nodes %v", s, nodes)
			}
		}
	})
}
