package remote

import (
	"strings"
	"testing"
)

// TestRMALanes: a connection takes UCX's puts and gets only where a lane does them in
// registered memory; UCX 1.13's shared-memory endpoints list puts and gets on sysv and posix,
// which reach only memory UCX allocated, so a pool's regions would get puts and gets emulated
// with UCX's messages (ucp_ep_print_info of real endpoints, and of one with an RDMA lane).
func TestRMALanes(t *testing.T) {
	const tcp = `#
# UCP endpoint
#
#                 lane[0]: cm rdmacm
#                 lane[1]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0 wireup
#
#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)
#
#                  rma_bw: mds [0] rndv_rkey_size 10
`
	const shm = `#
#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] am am_bw#0
#                 lane[1]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255]
#                 lane[2]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] rma_bw#0
#
#                 am_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)
#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)
#                  get[0]: 0..<bcopy>..(inf)
#                  put[1]: 0..<short>..4294967296..<bcopy>..(inf)
#                  get[1]: 0..<bcopy>..(inf)
`
	const rc = `#
#                 lane[0]:  1:rc_mlx5/mlx5_0:1.0 md[1]      -> md[1]/ib/sysdev[255] rma_bw#0 am am_bw#0
#                 lane[1]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255]
#                  put[0]: 0..<short>..124..<bcopy>..8256..<zcopy>..(inf)
#                  get[0]: 0..<bcopy>..8256..<zcopy>..(inf)
`
	for _, c := range []struct {
		name, info string
		want, cpu  bool
	}{{"tcp", tcp, false, true}, {"shm", shm, false, true}, {"rc", rc, true, false}, {"rc without puts", strings.ReplaceAll(strings.ReplaceAll(rc, "put[0]", "x"), "get[0]", "x"), false, false}} {
		if got := rmaLanes(c.info); got != c.want {
			t.Errorf("%s: rmaLanes %v, want %v", c.name, got, c.want)
		}
		// An abandoned operation's buffer is let go at the worker's Close only where no lane
		// may touch it on its own (zombieHolds).
		if got := cpuLanes(c.info); got != c.cpu {
			t.Errorf("%s: cpuLanes %v, want %v", c.name, got, c.cpu)
		}
	}
}
