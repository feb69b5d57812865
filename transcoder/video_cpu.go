package transcoder

import (
	"fmt"
	"time"
)

// A video's CPU budget: the one measure of an input's cost that does not depend on what else the
// machine is doing. Running out of it (the kernel's RLIMIT_CPU kills the run) makes a transform the
// input's fault; wall-clock time never does (the pipeline's stall watchdog only retries).

// cpuLeadIn is how much longer than it is an input counts for its CPU budget (cpuBudget): what an
// encode costs beyond its frames (loading ffmpeg, setting up x264, the poster, the fast-start pass),
// which weighs most on the shortest clips.
const cpuLeadIn = 10 * time.Second

// cpuBudget is the CPU time (RLIMIT_CPU) one run over an input of duration seconds may use:
// CPUPerInputSecond for each second of it and of cpuLeadIn, in whole seconds, at most MaxCPUTime.
// rule explains a budget below MaxCPUTime, for the refusal's message ("" when MaxCPUTime applies).
func (t *toolRunner) cpuBudget(duration float64) (limit time.Duration, rule string) {
	per := t.cfg.CPUPerInputSecond
	if per <= 0 || duration <= 0 {
		return t.cfg.MaxCPUTime, ""
	}
	want := time.Duration((duration + cpuLeadIn.Seconds()) * float64(per))
	if want >= t.cfg.MaxCPUTime {
		return t.cfg.MaxCPUTime, ""
	}
	limit = max((want + time.Second - 1).Truncate(time.Second), time.Second) // RLIMIT_CPU counts whole seconds
	return limit, fmt.Sprintf("for a %.1f s video: %s per second of video, counting %s more", duration, per, cpuLeadIn)
}
