package metrics

import (
	"runtime/debug"
	"sync"
)

// modulePath is pinmalloc's module, whose version pinmalloc_info reports.
const modulePath = "github.com/pinmalloc/pinmalloc"

// version returns pinmalloc's module version as the build recorded it: a tag or a
// pseudo-version where a program requires the module, "(devel)" where pinmalloc is the main
// module (its own tests), "unknown" where the binary has no build information.
var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == modulePath {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
})
