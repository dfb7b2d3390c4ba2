package copyengine

import (
	"strconv"
	"strings"
)

// The gather/scatter copy kernel of the Batcher, in PTX, loaded at run time with
// cuModuleLoadData: the driver JIT-compiles it for the device (about 114 ms on an H100 the first
// time, 0.08 ms from the driver's JIT cache after), so building pinmalloc needs no CUDA toolkit.
//
// pinmalloc_gather(jobs, count): jobs is the device-readable address of count {dst, src, len}
// u64 triples (CopyJob's layout). Block b copies jobs b, b+gridDim.x, b+2*gridDim.x, ... so any
// grid from 1 block up covers every job: one block per job, or a bounded grid striding over
// them. The threads of a block share a job. When dst and src are both 16-byte aligned the job
// moves in 16-byte vector loads and stores, four per thread per round (so a bounded grid still
// keeps enough bytes in flight over PCIe), then one per round, and the len%16 bytes left move
// one byte per thread; otherwise the whole job moves byte by byte. Jobs of one launch must not
// overlap (the Batcher refuses such batches): their order, and the order of bytes within a job,
// is unspecified. No barrier, no shared memory: every thread runs its own loop.
//
// Version and target: `.version 7.0` is PTX ISA 7.0 (CUDA 11.0), read by every driver of CUDA
// 11.0 and later, including CUDA 12.x and 13.0 (driver 580, which reads up to ISA 9.0). The
// instructions used (ld/st.global with .v4.u32 vectors, cvta, selp, mul.lo, predicated bra) are
// all older than ISA 2.0 and need no newer target. The target is sm_75 (the oldest
// architecture CUDA 13 still supports, JIT-compiled forward to sm_80, sm_90 and later), or the
// device's own compute capability on an older GPU (sm_50 to sm_72, which ISA 7.0 knows), so a
// Volta device loads it too. Checked with ptxas 11.8 for sm_75, sm_80 and sm_90
// (TestGatherPTXAssembles runs ptxas when one is installed).
const gatherPTXTemplate = `//
// pinmalloc gather/scatter copy kernel (copyengine.Batcher).
//
.version 7.0
.target sm_{{SM}}
.address_size 64

.visible .entry pinmalloc_gather(
	.param .u64 pinmalloc_gather_jobs,
	.param .u64 pinmalloc_gather_count
)
{
	.reg .pred	%p<6>;
	.reg .b16	%rs<2>;
	.reg .b32	%r<21>;
	.reg .b64	%rd<23>;

	ld.param.u64	%rd1, [pinmalloc_gather_jobs];
	ld.param.u64	%rd2, [pinmalloc_gather_count];
	cvta.to.global.u64	%rd1, %rd1;
	mov.u32	%r1, %ctaid.x;
	mov.u32	%r2, %nctaid.x;
	mov.u32	%r3, %tid.x;
	mov.u32	%r4, %ntid.x;
	cvt.u64.u32	%rd3, %r1;		// job index
	cvt.u64.u32	%rd4, %r2;		// job stride: the grid
	cvt.u64.u32	%rd5, %r3;		// this thread
	cvt.u64.u32	%rd6, %r4;		// threads per block
	shl.b64	%rd20, %rd6, 2;		// 4 rounds of vectors
	shl.b64	%rd21, %rd6, 4;		// bytes of one round of vectors

$JOB:
	setp.ge.u64	%p1, %rd3, %rd2;
	@%p1 bra	$DONE;
	mul.lo.u64	%rd7, %rd3, 24;
	add.u64	%rd7, %rd1, %rd7;
	ld.global.u64	%rd8, [%rd7];		// dst
	ld.global.u64	%rd9, [%rd7+8];		// src
	ld.global.u64	%rd10, [%rd7+16];	// len
	cvta.to.global.u64	%rd8, %rd8;
	cvta.to.global.u64	%rd9, %rd9;
	or.b64	%rd11, %rd8, %rd9;
	and.b64	%rd11, %rd11, 15;
	setp.eq.u64	%p2, %rd11, 0;
	shr.u64	%rd12, %rd10, 4;
	selp.b64	%rd12, %rd12, 0, %p2;	// vectors: len/16 when both are aligned, else none
	mov.u64	%rd13, %rd5;			// vector index

$VEC4:
	add.u64	%rd22, %rd13, %rd20;
	setp.gt.u64	%p5, %rd22, %rd12;
	@%p5 bra	$VEC;
	shl.b64	%rd14, %rd13, 4;
	add.u64	%rd15, %rd9, %rd14;
	add.u64	%rd16, %rd8, %rd14;
	ld.global.v4.u32	{%r5, %r6, %r7, %r8}, [%rd15];
	add.u64	%rd15, %rd15, %rd21;
	ld.global.v4.u32	{%r9, %r10, %r11, %r12}, [%rd15];
	add.u64	%rd15, %rd15, %rd21;
	ld.global.v4.u32	{%r13, %r14, %r15, %r16}, [%rd15];
	add.u64	%rd15, %rd15, %rd21;
	ld.global.v4.u32	{%r17, %r18, %r19, %r20}, [%rd15];
	st.global.v4.u32	[%rd16], {%r5, %r6, %r7, %r8};
	add.u64	%rd16, %rd16, %rd21;
	st.global.v4.u32	[%rd16], {%r9, %r10, %r11, %r12};
	add.u64	%rd16, %rd16, %rd21;
	st.global.v4.u32	[%rd16], {%r13, %r14, %r15, %r16};
	add.u64	%rd16, %rd16, %rd21;
	st.global.v4.u32	[%rd16], {%r17, %r18, %r19, %r20};
	mov.u64	%rd13, %rd22;
	bra	$VEC4;

$VEC:
	setp.ge.u64	%p3, %rd13, %rd12;
	@%p3 bra	$TAIL;
	shl.b64	%rd14, %rd13, 4;
	add.u64	%rd15, %rd9, %rd14;
	ld.global.v4.u32	{%r5, %r6, %r7, %r8}, [%rd15];
	add.u64	%rd16, %rd8, %rd14;
	st.global.v4.u32	[%rd16], {%r5, %r6, %r7, %r8};
	add.u64	%rd13, %rd13, %rd6;
	bra	$VEC;

$TAIL:
	shl.b64	%rd17, %rd12, 4;		// first byte after the vectors
	add.u64	%rd13, %rd17, %rd5;
$BYTE:
	setp.ge.u64	%p4, %rd13, %rd10;
	@%p4 bra	$NEXT;
	add.u64	%rd18, %rd9, %rd13;
	ld.global.u8	%rs1, [%rd18];
	add.u64	%rd19, %rd8, %rd13;
	st.global.u8	[%rd19], %rs1;
	add.u64	%rd13, %rd13, %rd6;
	bra	$BYTE;

$NEXT:
	add.u64	%rd3, %rd3, %rd4;
	bra	$JOB;
$DONE:
	ret;
}
`

// gatherEntry is the kernel's name in the module.
const gatherEntry = "pinmalloc_gather"

// gatherTarget returns the sm_ number the PTX targets on a device of compute capability
// major.minor, or 0 where PTX ISA 7.0 has no target for it (below 5.0).
func gatherTarget(major, minor int) int {
	cc := 10*major + minor
	switch {
	case cc >= 75:
		return 75
	case cc >= 50:
		return cc
	}
	return 0
}

// gatherPTX returns the kernel's PTX for target sm_<sm>.
func gatherPTX(sm int) string {
	return strings.Replace(gatherPTXTemplate, "{{SM}}", strconv.Itoa(sm), 1)
}
