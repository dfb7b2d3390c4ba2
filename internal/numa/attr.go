package numa

import (
	"io"
	"os"
)

// maxAttr bounds what is read of a sysfs file: the kernel writes an attribute within one page,
// at most 64 KiB. A longer file is no kernel's, and reading it whole would take as much memory
// as a hostile or broken mount makes it.
const maxAttr = 64 << 10

// readAttr returns the text of the sysfs attribute at path, or ok false when it cannot be read
// or is longer than maxAttr.
func readAttr(path string) (text string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttr+1))
	if err != nil || len(b) > maxAttr {
		return "", false
	}
	return string(b), true
}
