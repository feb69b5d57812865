package main

import (
	"os"
	"runtime/debug"
)

// The worker's Go heap is mostly short-lived: 128 KiB object-store chunks streaming through the
// embedded NATS server and the client on every download and upload. With Go's defaults (GOGC=100, no
// limit) the heap grows to twice what is live between collections, and that slack adds to the peak
// libvips reaches on a large photo (a 24 MP HEIC decodes in ~140 MiB of its own). Collecting at half
// the live heap and under a soft limit of 128 MiB took the peak (VmHWM) over three passes of a mixed
// corpus from 368 MiB to under 300 (bench/RESULTS.md, "Memory"), for a few percent more GC CPU. The
// limit is soft: a live heap above it (a huge embedded store) makes the GC work harder, never fails.
const (
	defaultGOGC       = 50
	defaultGoMemLimit = 128 << 20
)

// tuneGoMemory applies those defaults unless the operator set GOGC or GOMEMLIMIT, which the Go runtime
// reads itself. It reports whether it changed anything.
func tuneGoMemory() bool {
	_, gogc := os.LookupEnv("GOGC")
	_, limit := os.LookupEnv("GOMEMLIMIT")
	if gogc || limit {
		return false
	}
	debug.SetGCPercent(defaultGOGC)
	debug.SetMemoryLimit(defaultGoMemLimit)
	return true
}
