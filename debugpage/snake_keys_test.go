package debugpage

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestSnakeMapKeys: a map's keys come out as encoding/json gives them, a `"` or `\` in a key
// kept as it is (escaped once, by the JSON encoder), and int keys as their figures.
func TestSnakeMapKeys(t *testing.T) {
	type stats struct{ ByName map[string]int }
	in := stats{map[string]int{`a"b`: 1, `back\slash`: 2, `"quoted"`: 3, `tail\`: 4, "plain": 5}}
	got, err := json.Marshal(snake(in))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		ByName map[string]int `json:"by_name"`
	}
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if !reflect.DeepEqual(back.ByName, in.ByName) {
		t.Errorf("keys read back %v from %s, want %v", back.ByName, got, in.ByName)
	}
	ints, err := json.Marshal(snake(map[int]string{-3: "x", 7: "y"}))
	if err != nil || string(ints) != `{"-3":"x","7":"y"}` {
		t.Errorf("int keys: %s, %v", ints, err)
	}
}
