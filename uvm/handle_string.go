package uvm

import "fmt"

// String names the block for logs: "uvm block 3 (generation 7)", its slot in the tier's table
// and the slot's generation (a handle of a freed block has an older generation than the slot's);
// "uvm block <none>" for the zero Handle, which is never valid.
func (h Handle) String() string {
	if uint32(h) == 0 {
		return "uvm block <none>"
	}
	return fmt.Sprintf("uvm block %d (generation %d)", uint32(h)-1, uint32(h>>32))
}
