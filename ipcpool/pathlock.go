package ipcpool

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// The owner's lock on its path: a file beside the socket (the socket's path and ".lock")
// that the owner holds an exclusive flock on from before it looks at the socket until it has
// stopped serving. So owners starting at once on one path are one at a time: the first
// replaces a socket file left by an owner that died and serves, and the others fail with
// ErrServed, never removing the socket of the one that serves. The kernel lets the lock go
// when its holder exits, SIGKILL included, so a lock file left behind is never stale: the
// next owner takes it.
//
// The owner removes the file as it stops serving, still holding the lock. A process that
// opened the file before it was removed may lock it after: it then finds the file it holds is
// no longer the one at the name, and tries again with a new one.

// pathLock is an owner's lock on its path.
type pathLock struct {
	fd   int
	name string
}

// lockPath takes the lock of the socket path, or fails with ErrServed while another owner
// holds it, or ErrRefused where the system refuses the lock file.
func lockPath(path string) (*pathLock, error) {
	name := path + ".lock"
	for {
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return nil, fmt.Errorf("%w: the owner's lock file %s: %w", ErrRefused, name, err)
		}
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			unix.Close(fd)
			return nil, fmt.Errorf("%w: %s (another owner holds %s): %w", ErrServed, path, name, syscall.EADDRINUSE)
		}
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("%w: locking %s: %w", ErrRefused, name, err)
		}
		var held, now unix.Stat_t
		if unix.Fstat(fd, &held) == nil && unix.Stat(name, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			return &pathLock{fd: fd, name: name}, nil
		}
		unix.Close(fd) // removed by the owner that held it: take the next one
	}
}

// unlock removes the lock file and lets the lock go.
func (l *pathLock) unlock() {
	_ = unix.Unlink(l.name)
	unix.Close(l.fd)
}
