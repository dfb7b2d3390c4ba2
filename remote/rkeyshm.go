package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Shared-memory keys checked before UCX unpacks them.
//
// ucp_ep_rkey_unpack hands each memory domain's key in a packed key to the transport of that
// domain (uct_rkey_unpack), and UCX 1.13 cannot survive one that fails: it then releases the
// keys of every domain of the map, the ones not unpacked yet too, through component pointers
// never set (ucp_rkey_destroy; SIGSEGV; fixed in UCX 1.19, "UCP/RKEY: Keep md_map consistent
// with tl_rkey"). The shared-memory transports' unpacks act on what the key says: sysv's
// attaches the segment whose id it names (shmat), failing for an id that names no segment (a
// forged one, or an honest peer's segment gone once its pool released the region, or the
// peer died) or one this process may not attach; posix's opens the file the key names (the
// peer's descriptor through /proc/<pid>/fd, or a name) and maps the length it names, after
// asserting that length is not 0 (mm_posix.c:360: Debian's build aborts). So a descriptor of
// a peer over shared memory, forged or stale, ended this process at its first Put or Get
// (TestForgedShmKeyRefused).
//
// So before the unpack (shmKey): the key handed to UCX keeps only the memory domains of the
// endpoint's lanes, the ones UCX's puts and gets use, each named with its transport by
// ucp_ep_print_info ("-> md[1]/posix/...") through the same table by which UCX picks the
// transport that unpacks it; a sysv key must be as UCX packs one (the segment's id and
// the owner's address) and name a segment this process attaches, read and write, now, and
// stays attached by this process until UCX has attached it too (a segment the peer removes
// stays while attached: UCX's attach cannot then fail for it); a posix key must be as UCX
// packs one, of a length not 0, and name a file this process opens, read and write: of the
// peer's process where it names one (procfs mode). What fails is refused with
// ErrDescriptor, and UCX sees none of it. What is left: a posix file that goes (the peer
// closes it, or dies) between the check and UCX's open, and a segment whose owner takes this
// process's permission away in that moment (IPC_SET), end the process still; so does any
// other transport's unpack that fails (xpmem's, not in Debian's build).

// laneMD is a lane's remote memory domain and its transport, as ucp_ep_print_info writes it.
var laneMD = regexp.MustCompile(`(?m)^#\s+lane\[\d+\]:.*->\s+md\[(\d+)\]/([A-Za-z0-9_]+)/`)

// Layouts of UCX 1.13's shared-memory keys (uct_sysv_packed_rkey_t, uct_posix_packed_rkey_t,
// in the host's byte order) and posix's segment id flags (mm_posix.c).
const (
	sysvKeyLen       = 4 + 8 // the segment's id, the owner's address
	posixKeyLen      = 8 + 8 + 8
	posixKeyLength   = 16 // the length to map
	posixProcFS      = 1 << 63
	posixShmOpen     = 1 << 62
	posixFlags       = 0xf << 60
	posixPIDBits     = 30
	posixFDBits      = 30
	posixShmFileName = "ucx_shm_posix_"
)

// laneMDs returns the transport of each remote memory domain of c's endpoint's lanes ("" for
// none), read once the endpoint names its lanes. Under mu.
func (c *Conn) laneMDs() (*[64]string, error) {
	if c.mds != nil {
		return c.mds, nil
	}
	info, err := c.w.uw.EpInfo(c.ep)
	if err != nil {
		return nil, fmt.Errorf("%w: the lanes of the endpoint to %s: %w", ErrDescriptor, c.remote, err)
	}
	var mds [64]string
	n := 0
	for _, m := range laneMD.FindAllStringSubmatch(info, -1) {
		if i, err := strconv.Atoi(m[1]); err == nil && i < len(mds) {
			mds[i] = m[2]
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the endpoint to %s names no lane's memory domain: its keys cannot be checked", ErrDescriptor, c.remote)
	}
	c.mds = &mds
	return c.mds, nil
}

// shmKey returns packed (checked by ParseDescriptor: checkRkey) as it is handed to
// ucp_ep_rkey_unpack, followed by rkeyPad zeros: only the memory domains of c's lanes, their
// shared-memory keys checked, and the SysV segments it attached, to detach once UCX has
// unpacked the key (detach). Under mu.
func (c *Conn) shmKey(packed string) (key []byte, attached [][]byte, err error) {
	mds, err := c.laneMDs()
	if err != nil {
		return nil, nil, err
	}
	if len(packed) < rkeyFixed {
		return nil, nil, fmt.Errorf("%w: remote key of %d bytes", ErrDescriptor, len(packed))
	}
	key = make([]byte, rkeyFixed, len(packed)+rkeyPad)
	copy(key[rkeyMemType:], packed[rkeyMemType:rkeyFixed])
	var kept uint64
	p := rkeyFixed
	for m := binary.NativeEndian.Uint64([]byte(packed[:rkeyMDMap])); m != 0; m &= m - 1 {
		md := bits.TrailingZeros64(m)
		if p >= len(packed) || int(packed[p]) >= len(packed)-p {
			return nil, nil, fmt.Errorf("%w: remote key truncated in memory domain %d's key", ErrDescriptor, md)
		}
		n := int(packed[p])
		tl := packed[p+1 : p+1+n]
		p += 1 + n
		if mds[md] == "" {
			continue // no lane of this endpoint uses it: UCX need not unpack it
		}
		var err error
		switch mds[md] {
		case "sysv":
			var seg []byte
			if seg, err = checkSysvKey(tl); seg != nil {
				attached = append(attached, seg)
			}
		case "posix":
			err = checkPosixKey(tl, c.pid)
		}
		if err != nil {
			detach(attached)
			return nil, nil, fmt.Errorf("%w: the remote key's memory domain %d (%s): %w", ErrDescriptor, md, mds[md], err)
		}
		kept |= 1 << md
		key = append(key, byte(n))
		key = append(key, tl...)
	}
	binary.NativeEndian.PutUint64(key, kept)
	key = append(key, packed[p:]...) // what follows the domains' keys (system devices), as it came
	return key[:len(key)+rkeyPad], attached, nil
}

// checkSysvKey checks a sysv key (uct_sysv_packed_rkey_t) and attaches the segment it names,
// read and write, as UCX's unpack will: the segment, kept attached, stays for UCX's attach.
func checkSysvKey(tl string) ([]byte, error) {
	if len(tl) != sysvKeyLen {
		return nil, fmt.Errorf("a SysV key of %d bytes (%d)", len(tl), sysvKeyLen)
	}
	id := int(int32(binary.NativeEndian.Uint32([]byte(tl)))) // UCX's shmat takes an int
	seg, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("SysV segment %d, which this process cannot attach: %w", id, err)
	}
	return seg, nil
}

// checkPosixKey checks a posix key (uct_posix_packed_rkey_t, then, for a file by name in a
// directory, the directory's name) and opens the file it names, read and write, as UCX's
// unpack will. A file of a process through procfs must be the peer's (pid, 0 for none).
func checkPosixKey(tl string, pid uint32) error {
	if len(tl) < posixKeyLen {
		return fmt.Errorf("a posix key of %d bytes (%d at least)", len(tl), posixKeyLen)
	}
	b := []byte(tl)
	segID, length := binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[posixKeyLength:])
	if length == 0 || length > 1<<62 {
		return fmt.Errorf("a posix segment of %d bytes", length)
	}
	mmid := segID &^ posixFlags
	var path string
	switch {
	case segID&posixProcFS != 0:
		p, fd := uint32(mmid&(1<<posixPIDBits-1)), mmid>>posixPIDBits
		if p != pid || pid == 0 || fd >= 1<<posixFDBits {
			return fmt.Errorf("a posix segment of process %d (descriptor %d), not the peer's (%d)", p, fd, pid)
		}
		path = fmt.Sprintf("/proc/%d/fd/%d", p, fd)
	case segID&posixShmOpen != 0:
		path = fmt.Sprintf("/dev/shm/%s%x", posixShmFileName, mmid)
	default:
		dir, _, ok := strings.Cut(tl[posixKeyLen:], "\x00")
		if !ok || dir == "" {
			return errors.New("a posix segment in a directory whose name does not end in the key")
		}
		path = fmt.Sprintf("%s/%s%x", dir, posixShmFileName, mmid)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("a posix segment (%s) this process cannot open: %w", path, err)
	}
	_ = unix.Close(fd)
	return nil
}

// detach detaches the SysV segments shmKey attached.
func detach(attached [][]byte) {
	for _, seg := range attached {
		_ = unix.SysvShmDetach(seg)
	}
}
