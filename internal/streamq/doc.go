// Package streamq defers work until the device has passed a point in a CUDA stream: "hand this
// back once stream s has run everything queued on it before the push", without a CPU wait. It
// is the module's one stream-order mechanism: pinned.Pool's deferred buffers, device.Heap's
// deferred frees and uvm.Tier's batch completions all wait on its Lists.
//
// # Design
//
//   - Points (points.go) is the driver half, and has the rule every user keeps: memory changes
//     owner only after every stream that may use it has passed a point recorded after its
//     free (an event that has completed, a query that found the stream idle, a synchronize).
//     Its events come from a cuda.EventPool and go back to it.
//   - Lists (lists.go) keeps the deferred items, one list per stream, with their points taken
//     lazily: a push costs no driver call; a poll gives a busy stream's new items one event
//     (or their own, OwnPoints), none to an idle stream's, and hands back what the streams have
//     passed, oldest first per stream. A stream's state is dropped once it has been empty for
//     a few polls, or at once by Forget (Park keeps a forgotten list's items apart from its
//     handle until the caller releases them); a stream the driver refuses is answered by one
//     synchronize of the context (Recover); Drain waits for every stream with items; Settle
//     (lists_settle.go), for a caller about to let go of everything (device.Heap's Close),
//     hands every item back when no stream has work in flight, waiting only for a point it
//     records itself in the legacy default stream, which no query finds idle.
//   - Capture (capture.go): a stream a user's CUDA graph capture holds (or the legacy stream,
//     while a blocking stream captures) counts as running; no query, synchronize or point of
//     ours touches it, as the driver would refuse each and invalidate the capture. Points asks
//     cuStreamIsCapturing, the one call a capture allows, only where it would query or record,
//     and holds the capture gate from the ask to the act (cuda.HoldCaptureBegins), which the
//     module's StreamBeginCapture waits for.
//
// # Concurrency
//
// Points is safe for concurrent use. Lists' pushes and lookups are too; its polls, drains and
// recoveries are its reclaimer's, one at a time (pinned's reclaim holds its lock; device.Heap
// and uvm.Tier hold their mutex).
package streamq
