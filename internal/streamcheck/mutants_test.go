package streamcheck

// mutant is an ordering bug put back into the module: the edit of one file (old, occurring
// once, becomes new) that the checker must catch.
type mutant struct {
	name     string
	why      string // the bug, and the fix it undoes
	file     string // relative to the module's root
	old, new string
	// catch is the -test.run pattern of the case that catches it, run in the fast subset and
	// named here so that the list says what catches what; the long run asks the whole CI run.
	catch string
	fast  bool // in the default run's subset
}

// mutants are the ordering bugs the checker must catch.
var mutants = []mutant{
	{
		name:  "heap-self-trim",
		why:   "a stream heap (RetainSegments) trims itself when the arena is full, handing segments with its stream's work still queued to other streams (issue 25, 0c1cde1)",
		file:  "heap/segment.go",
		old:   "\tif !h.hold {\n\t\th.Trim()",
		new:   "\tif true {\n\t\th.Trim()",
		catch: "^TestRegressions$/^device_heap_self-trim$",
		fast:  true,
	},
	{
		name:  "tier-drops-restoring-copy",
		why:   "a tier short of host memory drops the host copy of a clean block whose restore still reads it",
		file:  "uvm/host.go",
		old:   "(b.readySeq != 0 && t.pending(dirH2D, b.readySeq)) || ",
		new:   "",
		catch: "^TestStreamOrder$",
	},
	{
		name:  "idle-without-legacy",
		why:   "a blocking stream is found idle without the legacy default stream's query, whose earlier work its frees wait for (3b1ecf4)",
		file:  "internal/streamq/points.go",
		old:   "\tif nonBlocking {\n\t\treturn true, nil\n\t}",
		new:   "\tif true {\n\t\treturn true, nil\n\t}",
		catch: "^TestStreamOrder$",
	},
}
