package debugpage

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// ErrSnapshot means a file that is not a snapshot this package can show: not JSON, not the
// document stats.json serves, of another format version, or with a map holding markup the
// package does not draw (which the page would have written into its HTML as it was).
var ErrSnapshot = errkind.New(pinmalloc.ErrInvalid, "debugpage: not a snapshot")

// ErrFrozen means a source added to the handler of a snapshot (Snapshot), which shows the
// sources as they were and takes no others.
var ErrFrozen = errkind.New(pinmalloc.ErrInvalid, "debugpage: a snapshot's page takes no sources")

// ErrInvalidName means a source name that is not valid UTF-8: stats.json and the page could
// not keep it as given.
var ErrInvalidName = errkind.New(pinmalloc.ErrInvalid, "debugpage: invalid source name")

// ErrNilSource means a nil pool, heap or tier given to an Add method (every render of the page
// and every sample of the timeline would have dereferenced it); nothing was registered.
var ErrNilSource = errkind.New(pinmalloc.ErrInvalid, "debugpage: nil source")

// Snapshot reads a snapshot saved from stats.json (the page's "download a snapshot" link, or
// stats.json?download=1) and returns a handler that serves it as it was: the page, map.svg and
// stats.json, under whatever prefix it is mounted at. Nothing can be registered with it.
// debugpage/cmd/view serves a file with it.
func Snapshot(r io.Reader) (*Handler, error) {
	var snap snapshot
	dec := json.NewDecoder(r)
	if err := dec.Decode(&snap); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	switch {
	case snap.Version != snapshotVersion:
		return nil, fmt.Errorf("%w: format version %d, want %d", ErrSnapshot, snap.Version, snapshotVersion)
	case snap.Taken.IsZero() || snap.Sources == nil:
		return nil, fmt.Errorf("%w: no time taken or no sources (is it stats.json?)", ErrSnapshot)
	}
	for _, v := range snap.Sources {
		if err := checkMapSVG(v.MapSVG); err != nil {
			return nil, fmt.Errorf("%w: the map of %q is not one this package draws: %w",
				ErrSnapshot, v.Name, err)
		}
	}
	snap.offline = true
	return &Handler{frozen: &snap}, nil
}
