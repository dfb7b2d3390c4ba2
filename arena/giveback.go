package arena

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// errGiveBack heads the error of a provider that failed to give memory back: a decommit's
// munlock or madvise, a driver's unmap, unregister or release. It matches ErrCommit, as those
// refusals always did, and says what failed: ErrCommit's own words, "cannot commit memory",
// told of a commit where none was made. Not exported: an exported sentinel matching ErrCommit
// would be a second one of the same meaning.
var errGiveBack = errkind.New(ErrCommit, "arena: cannot give memory back")

// GiveBackRefused returns err, the error of a provider's call that failed to give memory back
// (Decommit, Release, or a step of one), headed "arena: cannot give memory back": it matches
// ErrCommit (and so pinmalloc.ErrRefused) and everything err matches under errors.Is. A
// provider wraps such a refusal with it, not with ErrCommit, whose words are of a commit. It
// returns nil for a nil err.
func GiveBackRefused(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errGiveBack, err)
}
