package cudamem

import (
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// errGiveBack heads the error of a driver call that refused to give memory back (cuMemUnmap,
// cuMemRelease of a decommit or a region's release). It matches arena.ErrCommit under
// errors.Is, as those refusals always did, and says what failed: wrapping arena.ErrCommit
// itself read "arena: cannot commit memory: cuMemUnmap ...", a commit where none was made.
var errGiveBack = errkind.New(arena.ErrCommit, "cudamem: cannot give memory back")
