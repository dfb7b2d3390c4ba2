package cudamem

// HostOptions: what the pinned host providers (HostVMM, HostRegister) are asked for.

import "github.com/pinmalloc/pinmalloc/arena"

// HostOptions configures the CUDA pinned host providers.
type HostOptions struct {
	// HostOptions applies to the registration provider's mappings (HugePages, Populate; its
	// Node is replaced by NUMA); with Populate the VMM provider too commits each region whole
	// when it is reserved.
	arena.HostOptions
	// Devices lists the ordinals of other devices that may read and write VMM host memory
	// (copies and zero-copy kernels): the device the provider is made on always may. An
	// ordinal the machine lacks, or more than 15 devices with the provider's own,
	// makes NewHostVMM fail with arena.ErrInvalid. A registration is
	// portable to every device without it.
	Devices []int
	// NUMA selects the host NUMA node of the memory, on either path:
	// arena.NUMANearest (the default) the node nearest the device (DeviceNode),
	// arena.NUMANode(n) node n. VMM host memory is created there; registered memory is bound
	// there before it is touched.
	NUMA arena.NUMA
}
