package fakecuda

import "github.com/pinmalloc/pinmalloc/internal/cuda"

// Access is one access descriptor of Driver.MemSetAccess: a location and its flags (0 none,
// 1 read, 3 read and write).
type Access struct {
	Loc   cuda.MemLocation
	Flags int
}

// Flags of an Access.
const (
	// AccessNone revokes access.
	AccessNone = 0
	// AccessRead grants reads.
	AccessRead = 1
	// AccessReadWrite grants reads and writes.
	AccessReadWrite = 3
)
