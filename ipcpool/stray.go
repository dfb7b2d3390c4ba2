package ipcpool

import (
	"errors"
	"slices"
	"sync"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// Spaces given up on a failure path: an Attach, Serve or adoption that fails after it mapped
// the pool gives its space up, and when the driver refuses to give back part of it (a
// registration, a VMM mapping), nothing of the caller's is left to hold what stays. The
// package holds it, with its device open (closeDevice waits for it), and tries again at
// every later Attach, Serve and Close (retryStrays); the failing call's error says what stays.
var strays struct {
	mu      sync.Mutex
	list    []stray
	closing []*cuda.Device // devices whose Close waits for a stray's release
}

// stray is a space given up that holds memory the driver refused to give back, and the
// device it was mapped for (nil: none).
type stray struct {
	sp  *space
	dev *cuda.Device
}

// abandon is sp's close on a failure path whose error is err, where nothing else will hold
// sp: what the driver refuses to give back stays with the package until a retry succeeds. It
// returns err, joined with close's error, which says what stays.
func abandon(sp *space, dev *cuda.Device, err error) error {
	cerr := sp.close(false)
	if sp.held() {
		strays.mu.Lock()
		strays.list = append(strays.list, stray{sp, dev})
		strays.mu.Unlock()
	}
	if cerr == nil {
		return err
	}
	return errors.Join(err, cerr)
}

// closeDevice closes dev, or, while a stray was mapped for it, leaves that to the stray's
// release.
func closeDevice(dev *cuda.Device) {
	if dev == nil {
		return
	}
	strays.mu.Lock()
	if slices.ContainsFunc(strays.list, func(s stray) bool { return s.dev == dev }) {
		strays.closing = append(strays.closing, dev)
		dev = nil
	}
	strays.mu.Unlock()
	if dev != nil {
		_ = dev.Close()
	}
}

// retryStrays gives back what the driver refused on failure paths, and closes the devices
// that waited for it.
func retryStrays() {
	strays.mu.Lock()
	defer strays.mu.Unlock()
	if len(strays.list) == 0 {
		return
	}
	kept := strays.list[:0]
	for _, s := range strays.list {
		_ = s.sp.close(false) // its error said what stays when the space was first given up
		if s.sp.held() {
			kept = append(kept, s)
		}
	}
	clear(strays.list[len(kept):])
	strays.list = kept
	waiting := strays.closing[:0]
	for _, dev := range strays.closing {
		if slices.ContainsFunc(kept, func(s stray) bool { return s.dev == dev }) {
			waiting = append(waiting, dev)
			continue
		}
		_ = dev.Close()
	}
	clear(strays.closing[len(waiting):])
	strays.closing = waiting
}
