// Package fence gives a fast path the asymmetric barrier pair that lets it publish "I am
// inside" and then check "may I enter" with plain memory operations, where the usual way (a
// lock, or an atomic swap) costs an atomic read-modify-write on every call.
//
// The fast side stores its flag with a plain store and then loads the other side's flag; on
// its own that is not ordered (a CPU may satisfy the load before its store is visible). The
// slow side stores its flag and then calls Heavy, which makes every running thread of the
// process execute a full barrier (Linux membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED), before
// it loads the fast side's flag. Then at least one side sees the other's store: either the
// fast path sees the slow side's flag and backs off, or the slow side sees the fast path
// inside and waits for it to leave. The fast path leaves with Release, so the slow side that
// sees it gone sees everything it wrote. This is the pairing Folly's asymmetric barriers and
// userspace RCU use.
//
// Available is false where the kernel has no private expedited membarrier, and under the race
// detector, which cannot see the ordering Heavy gives: callers then take their locked paths.
package fence

// Available reports whether Heavy works here, so that a fast path may rely on it. The first
// call registers the process with the kernel.
func Available() bool { return available() }

// Decided reports whether the process has paid what Available's first call costs (the
// registration with the kernel, which waits for an RCU grace period: milliseconds, seconds on
// a busy machine). Where there is nothing to register it is true.
func Decided() bool { return decided() }
