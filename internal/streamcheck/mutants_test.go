package streamcheck

// mutant is an ordering bug put back into the module: the edit of one file (old, occurring
// once, becomes new) that the checker must catch.
type mutant struct {
	name     string
	why      string // the bug, and the fix it undoes (a commit, an issue)
	file     string // relative to the module's root
	old, new string
	// catch is the -test.run pattern of the case that catches it, run in the fast subset and
	// named here so that the list says what catches what; the long run asks the whole CI run
	// of the checker instead.
	catch string
	fast  bool // in the default run's subset: one, a mutant of uvm (the fewest packages to build again)
	// pkg, when set, is the package whose tests catch the mutant (catch), for the few bugs the
	// checker's runs do not reach (each says why): a race between two goroutines (the model is
	// one), a fault the driver injects, a stream destroyed before it is forgotten (which the
	// model cannot tell from a new stream given the same handle), a wait the contract makes
	// redundant (a stream is synchronized before it is forgotten), churn beyond a run's.
	pkg string
}

// ciRun is the checker's CI run, as a -test.run pattern.
const ciRun = "^(TestStreamOrder|TestRegressions)$"

// mutants are the ordering bugs the checker must catch: the fifteen kinds it was first tried
// on (issue 37) and every ordering bug fixed in the module since the checker exists, each as
// the code was before its fix, or as close as the code that replaced it allows.
var mutants = []mutant{
	// Device heaps: memory changes owner only after the streams that may use it have passed.
	{
		name:  "heap-self-trim",
		why:   "a stream heap (RetainSegments) trims itself when the arena is full, handing segments with its stream's work still queued to other streams (issue 25, 0c1cde1)",
		file:  "heap/segment.go",
		old:   "\tif !h.hold {\n\t\th.Trim()",
		new:   "\tif true {\n\t\th.Trim()",
		catch: "^TestRegressions$/^device_heap_self-trim$",
	},
	{
		name:  "heap-held-spares-to-arena",
		why:   "a stream heap's emptied segment goes to the arena (and its purge) at the free, not at its owner's Trim (issue 25, 0c1cde1); the model's heaps keep a spare page of every class and empty a segment only after long churn, which the checker's runs do not reach",
		file:  "heap/segment.go",
		old:   "\tif h.hold {\n\t\t// Kept, committed, until Trim",
		new:   "\tif false {\n\t\t// Kept, committed, until Trim",
		pkg:   "./heap",
		catch: "^TestHeldFreesNeverDecommit$",
	},
	{
		name:  "heap-held-object-idle",
		why:   "a stream heap's freed object page is tracked idle, and the purge decommits it under its stream's queued work (issue 25, 0c1cde1); its segment's granule goes only once every page of it is idle, which the checker's runs do not reach",
		file:  "heap/object.go",
		old:   "\tif !h.hold {\n\t\th.idle(pg)\n\t}",
		new:   "\th.idle(pg)",
		pkg:   "./heap",
		catch: "^TestHeldFreesNeverDecommit$",
	},
	{
		name:  "device-cross-stream-free-at-once",
		why:   "FreeAsync on another stream than the block's frees it at once, before that stream has passed the free",
		file:  "device/device.go",
		old:   "\tif owner == h.streams[s] && size <= heap.HugeThreshold {",
		new:   "\tif size <= heap.HugeThreshold {",
		catch: ciRun,
	},
	{
		name:  "device-huge-free-at-once",
		why:   "FreeAsync of a huge block on its own stream gives it to the arena at once, where any stream takes it before the free's stream has passed it",
		file:  "device/device.go",
		old:   "\tif owner == h.streams[s] && size <= heap.HugeThreshold {",
		new:   "\tif owner == h.streams[s] && size > 0 {",
		catch: ciRun,
	},
	{
		name:  "device-reclaim-without-sync",
		why:   "a reclaim (Trim, an Alloc out of memory) trims a stream heap without synchronizing its stream: the caller's own was skipped (issue 25, 0c1cde1)",
		file:  "device/device.go",
		old:   "\t\tif err := h.dev.StreamSynchronize(uintptr(s)); err != nil {",
		new:   "\t\tif err := error(nil); err != nil {",
		catch: ciRun,
	},
	{
		name:  "device-reclaim-without-legacy",
		why:   "a reclaim synchronizes a blocking stream but not the legacy stream whose earlier work its same-stream frees follow (53e398c)",
		file:  "device/device.go",
		old:   "\tif held, dflt := h.heldBy(); held {",
		new:   "\tif held, dflt := h.heldBy(); held && !held {",
		catch: "^TestRegressions$/^device_reclaim_keeps_the_legacy_order$",
	},
	{
		name:  "device-zero-free-not-waited",
		why:   "a ZeroOnFree Free does not wait for its memset, queued on the legacy stream, which non-blocking streams do not wait for (b5fb06a)",
		file:  "device/guard.go",
		old:   "\t\terr = h.points().WaitLegacy(h.dev.MemsetD8(uintptr(p), 0, n))",
		new:   "\t\terr = h.dev.MemsetD8(uintptr(p), 0, n)",
		catch: "^TestRegressions$/^device_ZeroOnFree_Free_waits_for_its_scrub$",
	},
	{
		name:  "device-copy-records-nothing",
		why:   "an async copy from or into a pool buffer does not record its stream on it: a Free right after it hands the buffer out under the copy (59f89d3)",
		file:  "device/copy.go",
		old:   "\t\terr = pool.RecordStream(mem.Bytes(addr, n), s)",
		new:   "\t\terr = nil",
		catch: ciRun,
	},

	// Pools: a deferred buffer is handed out again only once its streams have passed it.
	{
		name:  "pool-freeasync-frees-at-once",
		why:   "FreeAsync frees at once, as for a pool the driver copies synchronously",
		file:  "pinned/stream.go",
		old:   "func (p *Pool) FreeAsync(b []byte, s cuda.Stream) error {\n\to := p.order\n\tif o == nil {",
		new:   "func (p *Pool) FreeAsync(b []byte, s cuda.Stream) error {\n\to := p.order\n\tif o == nil || true {",
		catch: ciRun,
	},
	{
		name:  "pool-record-does-nothing",
		why:   "RecordStream records nothing, so a Free of a buffer a stream uses frees it at once (device copies record through it too: 59f89d3, f07a12b)",
		file:  "pinned/stream.go",
		old:   "func (p *Pool) RecordStream(b []byte, s cuda.Stream) error {\n",
		new:   "func (p *Pool) RecordStream(b []byte, s cuda.Stream) error {\n\tif p.order != nil {\n\t\treturn nil\n\t}\n",
		catch: ciRun,
	},
	{
		name:  "pool-cache-drained-without-query",
		why:   "a full FreeAsync cache goes back to its pages without the idle query of its stream (315af35's drainPend)",
		file:  "pinned/pend.go",
		old:   "\tif idle, err := o.lists.Idle(s.pendL); err != nil || !idle {",
		new:   "\tif idle, err := true, error(nil); err != nil || !idle {",
		catch: "^TestRegressions$/^FreeAsync_cache_taken_back_under_queued_copies$",
	},
	{
		name:  "pool-claim-any-list",
		why:   "a Free of a buffer recorded on one stream defers it on the list found last whatever its stream (edd56ff's claim without its check)",
		file:  "pinned/pool.go",
		old:   "\t\t\t\tif l != nil && streamOf(l) == tagStream(t) && r.tag.CompareAndSwap(t, tagNone) {",
		new:   "\t\t\t\tif l != nil && r.tag.CompareAndSwap(t, tagNone) {",
		catch: "^TestRegressions$/^free_of_a_buffer_recorded_on_another_stream_than_the_last_checked$",
	},
	{
		name:  "pool-shared-waits-for-one",
		why:   "a buffer recorded on several streams is freed once the first of them has passed it",
		file:  "pinned/streamtag.go",
		old:   "\t\t\tu.left++",
		new:   "\t\t\tu.left = 1",
		catch: ciRun,
	},
	{
		name:  "pool-quota-never-reclaims",
		why:   "an Alloc the quota refuses does not take back the deferred buffers the streams have passed (issue 25 (2), 24a8419)",
		file:  "pinned/guard.go",
		old:   "\t\t_ = p.reclaim(true) // deferred buffers the streams have passed leave the quota",
		new:   "\t\treturn false",
		catch: "^TestRegressions$/^pool_quota_never_reclaims$",
	},
	{
		name:  "pool-quota-ignores-caches",
		why:   "a quota refusal with nothing on the lists does not look at the shards' FreeAsync caches (0c2412f)",
		file:  "pinned/reclaim.go",
		old:   "\tif o.weight() > 0 || o.cached.Load() > 0 {",
		new:   "\tif o.weight() > 0 {",
		catch: "^TestRegressions$/^pool_quota_with_a_buffer_in_a_FreeAsync_cache$",
	},
	{
		name:  "pool-quota-ignores-reclaim-under-way",
		why:   "a quota refusal does not wait for the reclaim under way, which has taken the buffers off the lists and not freed them yet (issue 37); two goroutines race there, and the model is one",
		file:  "pinned/reclaim.go",
		old:   "\tif !o.reclMu.TryLock() {\n\t\treturn true\n\t}",
		new:   "",
		pkg:   "./pinned",
		catch: "^TestFakeQuotaWaitsForReclaim$",
	},
	{
		name:  "pool-quota-ignores-buffers-returned",
		why:   "a quota refusal that finds nothing coming back any more is final, though a reclaim took back, after the sum that found no room, the buffers that filled the quota; two goroutines race there, and the model is one",
		file:  "pinned/guard.go",
		old:   "\t\t\tif p.order.returned.Load() == back {",
		new:   "\t\t\tif true || p.order.returned.Load() == back {",
		pkg:   "./pinned",
		catch: "^TestFakeQuotaRoomAfterReclaim$",
	},
	{
		name:  "pool-quota-ignores-cache-on-its-way",
		why:   "a quota refusal is told nothing comes back while a FreeAsync moves a shard's cache to its list, out of the fast section, once the shard's cache emptied meanwhile; two goroutines race there, and the model is one",
		file:  "pinned/pend.go",
		old:   "\t\t\to.cached.Add(1)\n\t\t\tp.exit(s)",
		new:   "\t\t\tp.exit(s)",
		pkg:   "./pinned",
		catch: "^TestFakeQuotaSeesCacheOnItsWay$",
	},
	{
		name:  "pool-forget-without-wait",
		why:   "ForgetStream takes a stream's buffers back, and forgets it on the live ones, without waiting for it; the checker's contract synchronizes a stream before it forgets it",
		file:  "pinned/forget.go",
		old:   "\tif err := o.waitFor(s, o.lists.Lookup(uintptr(s))); err != nil {",
		new:   "\tif err := error(nil); err != nil {",
		pkg:   "./pinned",
		catch: "^TestFakeForgetStream$",
	},

	// The rule itself (internal/streamq): points, polls, waits, lost lists.
	{
		name:  "idle-without-legacy",
		why:   "a blocking stream is found idle without the legacy default stream's query, whose earlier work its frees wait for (3b1ecf4; a blind spot of the checker before PoolRawFree)",
		file:  "internal/streamq/points.go",
		old:   "\tif !nonBlocking {\n\t\tif p.Capturing(streamLegacy) {",
		new:   "\tif false {\n\t\tif p.Capturing(streamLegacy) {",
		catch: "^TestRegressions$/^free_on_a_blocking_stream_after_a_legacy_stream's_copy$",
	},
	{
		name:  "idle-default-stream",
		why:   "the legacy default stream is found idle by its own query, though its work waits for every blocking stream's (3b1ecf4)",
		file:  "internal/streamq/points.go",
		old:   "\tif DefaultStream(s) {\n\t\treturn false, true, nil\n\t}\n",
		new:   "",
		catch: "^TestRegressions$/^free_on_the_legacy_stream_after_a_blocking_stream's_copy$",
	},
	{
		name:  "wait-stream-without-legacy",
		why:   "a stream's wait (Drain: device Sync and reclaim; ForgetStream) does not synchronize the legacy stream after a blocking one (a4801da)",
		file:  "internal/streamq/points.go",
		old:   "\tif err := p.dev.StreamSynchronize(s); err != nil {\n\t\treturn err\n\t}\n\tif p.Capturing(streamLegacy) {",
		new:   "\treturn p.dev.StreamSynchronize(s)\n\tif p.Capturing(streamLegacy) {",
		catch: "^TestRegressions$/^heap_Sync_of_a_free_ordered_by_the_legacy_stream$",
	},
	{
		name:  "poll-takes-marked-early",
		why:   "a poll hands back a stream's marked items without asking whether their event has completed",
		file:  "internal/streamq/lists_poll.go",
		old:   "\t\tif !passed {\n\t\t\treturn done, pollBusy, nil\n\t\t}",
		new:   "\t\tif !passed && false {\n\t\t\treturn done, pollBusy, nil\n\t\t}",
		catch: ciRun,
	},
	{
		name:  "poll-takes-open-as-idle",
		why:   "a poll takes a stream's new items for passed without a query or an event",
		file:  "internal/streamq/lists_poll.go",
		old:   "\tif idle, quiet, err = p.idleQuiet(l.s, ls.nonBlocking(l)); err != nil || idle {",
		new:   "\tif idle, quiet, err = true, false, error(nil); err != nil || idle {",
		catch: ciRun,
	},
	{
		name:  "poll-ignores-capture",
		why:   "a poll queries, and records a point in, a stream a user's CUDA graph capture holds: the driver refuses it and invalidates the capture",
		file:  "internal/streamq/lists_poll.go",
		old:   "\tif (l.ev != 0 || len(l.open) > 0) && p.Capturing(l.s) {",
		new:   "\tif false {",
		pkg:   "./internal/streamq",
		catch: "^TestPollDuringCapture$",
	},
	{
		name:  "own-point-taken-as-passed",
		why:   "a list borrowing its items' own points (uvm's batches) takes them for passed without querying the event",
		file:  "internal/streamq/lists_poll.go",
		old:   "\t\tidle, err = p.Passed(own) // every open item's work is before it",
		new:   "\t\tidle, err = true, nil",
		catch: ciRun,
	},
	{
		name:  "recover-takes-later-items",
		why:   "a lost list's recovery hands back the items pushed after the poll found it lost, whose work may be queued after the synchronize (5363b64); a list is lost only on a stream destroyed before it is forgotten, which the model cannot tell from a new stream given its handle",
		file:  "internal/streamq/lists_release.go",
		old:   "\t\tn := l.lostOpen // set by the reclaimer's Poll",
		new:   "\t\tn := -1 // set by the reclaimer's Poll",
		pkg:   "./pinned",
		catch: "^TestFakeLostListKeepsLaterFrees$",
	},
	{
		name:  "recover-stale-lost-count",
		why:   "a lost list's count of the open items the loss saw stays as it was when a later poll, before Recover (a capture put it off, or Poll and Recover called apart), marks those items: Recover then hands back, as the oldest open items, newer ones pushed while its synchronize ran; a list is lost only on a refused record or a stream destroyed before it is forgotten, which the model does not inject",
		file:  "internal/streamq/lists_poll.go",
		old:   "\t\t\tl.lostOpen = 0 // the open items a loss saw are marked now: Recover takes them so\n",
		new:   "",
		pkg:   "./internal/streamq",
		catch: "^TestRecoverStaleLostCount$",
	},

	{
		name:  "settle-without-legacy-point",
		why:   "a device heap's Close hands back the legacy stream's frees, and gives back the legacy stream's heap, without waiting for a point there, after finding the legacy stream idle by its own query: a blocking stream's work the heap never saw, which a free on the legacy stream comes after, still uses the memory (wt-51); the checker's runs forget (synchronize) every stream before Close",
		file:  "internal/streamq/lists_settle.go",
		old:   "\t\tif werr = ls.points.WaitPoint(all[dflt]); werr != nil {",
		new:   "\t\tif werr = error(nil); werr != nil {",
		pkg:   "./device",
		catch: "^TestFakeCloseWaitsForUnseenBlockingStream(Deferred)?$",
	},
	{
		name:  "running-refused-as-idle",
		why:   "Points.Running takes a stream whose query the driver refuses for idle: a device heap's Close gives back the memory of a stream destroyed without ForgetStream while the work queued on it still runs (cuStreamDestroy returns at once), instead of synchronizing the context first; the model never destroys a stream before it is forgotten",
		file:  "internal/streamq/points.go",
		old:   "\t\t} else if err != nil && rerr == nil {\n\t\t\trefused, rerr = s, err\n\t\t}",
		new:   "\t\t} else if false {\n\t\t\trefused, rerr = s, err\n\t\t}",
		pkg:   "./device",
		catch: "^TestFakeCloseWaitsForDestroyedStream$",
	},

	// The tier: a block moves only after its users' and its copies' points.
	{
		name:  "tier-drops-restoring-copy",
		why:   "a tier short of host memory drops the host copy of a clean block whose restore still reads it (issue 37: a blind spot of the checker before HostPressure)",
		file:  "uvm/host.go",
		old:   "(b.readySeq != 0 && t.pending(dirH2D, b.readySeq)) || ",
		new:   "",
		catch: "^TestRegressions$/^host_copy_dropped_under_a_queued_restore$",
		fast:  true,
	},
	{
		name:  "tier-evict-ignores-releases",
		why:   "an eviction's copies do not wait for the release events of the streams that used the blocks",
		file:  "uvm/evict.go",
		old:   "\terr := t.queueWaits(t.engine.d2h)",
		new:   "\terr := error(nil)",
		catch: ciRun,
	},
	{
		name:  "tier-acquire-ignores-restore",
		why:   "Acquire does not make the user's stream wait for the restore still copying the block",
		file:  "uvm/access.go",
		old:   "\tif b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {",
		new:   "\tif false {",
		catch: ciRun,
	},
	{
		name:  "tier-restore-ignores-eviction",
		why:   "a restore reads a host copy an eviction still writes",
		file:  "uvm/restore.go",
		old:   "\t\tif b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq) { // the host copy is still being written",
		new:   "\t\tif false {",
		catch: ciRun,
	},
	{
		name:  "tier-host-ignores-eviction",
		why:   "AcquireHost hands Go a host copy an eviction still writes",
		file:  "uvm/host.go",
		old:   "\tif b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq) {\n\t\tif err := t.dev.EventSynchronize(uintptr(b.evictEv)); err != nil {",
		new:   "\tif false {\n\t\tif err := t.dev.EventSynchronize(uintptr(b.evictEv)); err != nil {",
		catch: ciRun,
	},
	{
		name:  "tier-retire-fallback-ignores-copies",
		why:   "a retire whose waits cannot be queued waits for the release events but not for the D2H stream, whose eviction copy may still write the freed block's host buffer (4df4900); the waits fail only when a test injects the fault",
		file:  "uvm/completion.go",
		old:   "\tif serr := t.dev.StreamSynchronize(uintptr(t.engine.d2h)); serr != nil {\n\t\treturn false, errors.Join(err, serr)\n\t}",
		new:   "",
		pkg:   "./uvm",
		catch: "^TestFreeWaitsFailKeepStreamOrder$",
	},
	{
		name:  "tier-free-reuses-after-failed-wait",
		why:   "a Free whose waits the driver refuses on the D2H stream and on the CPU (a context with a sticky error) hands the block's VRAM and host buffer on all the same, under work that may still use them; the waits fail only after a fault, which the model does not make",
		file:  "uvm/completion.go",
		old:   "\tfor _, w := range t.rel.waits {\n\t\tif serr := t.dev.EventSynchronize(uintptr(w.ev)); serr != nil {\n\t\t\treturn false, errors.Join(err, serr)\n\t\t}\n\t}\n\tif serr := t.dev.StreamSynchronize(uintptr(t.engine.d2h)); serr != nil {\n\t\treturn false, errors.Join(err, serr)\n\t}",
		new:   "\t_ = t.dev.StreamSynchronize(uintptr(t.engine.d2h)) // a failed wait ignored",
		pkg:   "./uvm",
		catch: "^TestFreeAfterFaultHoldsMemoryBack$",
	},
	{
		name:  "tier-abort-evict-ignores-failed-launch",
		why:   "an eviction whose first launch queued some copies and then failed does not wait for them, so the block's host buffer, handed to another block when the pool is full, takes the copy after Go wrote it; the model's movers queue all of a launch or nothing",
		file:  "uvm/evict.go",
		old:   "\tif !e.tried {\n\t\treturn err\n\t}",
		new:   "\tif e.queued == 0 {\n\t\treturn err\n\t}",
		pkg:   "./uvm",
		catch: "^TestAbortedEvictionWaitsForItsCopies$",
	},
	{
		name:  "tier-host-copy-ignores-failed-copy",
		why:   "AcquireHost of a dirty block whose copy to the host the Mover queued and then failed does not wait for it, so the block's host buffer, handed to another block when the pool is full, takes the copy after Go wrote it; the model's movers queue all of a copy or nothing",
		file:  "uvm/host.go",
		old:   "\t\tif tried {\n\t\t\tif serr := t.settleCopies([]BlockID{id}); serr != nil {",
		new:   "\t\tif false {\n\t\t\tif serr := t.settleCopies([]BlockID{id}); serr != nil {",
		pkg:   "./uvm",
		catch: "^TestFailedHostCopyWaitsForIt$",
	},
	{
		name:  "tier-undo-restore-frees-read-host",
		why:   "a restore whose Mover queued a copy and then failed leaves the block on the host, and its Free gives the host buffer back to the pool under that copy, which faults once a trim of the pool unmaps it; the model's movers queue all of a launch or nothing",
		file:  "uvm/restore.go",
		old:   "\t\tif b := &t.blocks[id]; b.host != nil {\n\t\t\tb.readySeq, b.readyEv = t.batches.issued[dirH2D], ev",
		new:   "\t\tif b := &t.blocks[id]; false {\n\t\t\tb.readySeq, b.readyEv = t.batches.issued[dirH2D], ev",
		pkg:   "./uvm",
		catch: "^TestAbortedRestoreFreeWaitsForItsCopies$",
	},
	{
		name:  "tier-acquire-ignores-other-streams",
		why:   "an Acquire on s2 of a block released on s1 and still on the device does not wait for s1's release, so work on s2 reads the block before s1's writes have run",
		file:  "uvm/access.go",
		old:   "\t\terr = t.waitReleases(b, s)",
		new:   "\t\terr = nil",
		pkg:   "./uvm",
		catch: "^(TestAcquireOnAnotherStreamWaitsForRelease|TestLateWork)$",
	},
	{
		name:  "tier-forget-keeps-releases",
		why:   "ForgetStream leaves a block's release events keyed by the forgotten stream's handle, which the driver gives to a stream created later: an Acquire there takes the old stream's release for its own and skips the wait; the model synchronizes a stream before it forgets it, so the old release has passed when the new stream gets its handle",
		file:  "uvm/streams.go",
		old:   "\tt.forgetReleases(s)\n\tt.forget(s)",
		new:   "\tt.forget(s)",
		pkg:   "./uvm",
		catch: "^TestReusedHandleWaitsForOldRelease$",
	},
	{
		name:  "tier-batch-merges-forgotten-releases",
		why:   "an eviction keeps one release event per stream handle, so the event of a forgotten stream and that of a new stream given its handle count as one stream's, and the copy waits for the newer only; the model synchronizes a stream before it forgets it, so the forgotten stream's release has passed",
		file:  "uvm/release.go",
		old:   "w.s == r.s && w.gone == r.gone {",
		new:   "w.s == r.s {",
		pkg:   "./uvm",
		catch: "^TestReusedHandleEvictionWaitsForBoth$",
	},
	{
		name:  "heap-forget-destroyed-without-wait",
		why:   "ForgetStream of a stream destroyed before it, which the driver refuses, gives back its deferred frees and its heap's memory without the synchronize of the context that waits for the work the driver still runs there; the model forgets a stream only once synchronized, before destroying it",
		file:  "device/release.go",
		old:   "\tif err := h.lists.Points().WaitAll(); err != nil {",
		new:   "\tif err := error(nil); err != nil {",
		pkg:   "./device",
		catch: "^TestFakeForgetDestroyedStream$",
	},
}
