package numa

import (
	"io"
	"os"
	"syscall"
)

// maxAttr bounds what is read of a sysfs file: the kernel writes an attribute within one page,
// at most 64 KiB. A longer file is no kernel's, and reading it whole would take as much memory
// as a hostile or broken mount makes it.
const maxAttr = 64 << 10

// readAttr returns the text of the sysfs attribute at path, or ok false when it cannot be read,
// is longer than maxAttr, or is not a regular file (as every sysfs attribute is). It opens
// without blocking, so that a FIFO or device in its place cannot stall it, and reads only a
// regular file.
func readAttr(path string) (text string, ok bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxAttr+1))
	if err != nil || len(b) > maxAttr {
		return "", false
	}
	return string(b), true
}
