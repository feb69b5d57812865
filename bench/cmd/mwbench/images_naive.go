package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/mediaworker/mediaworker/transcoder"
)

// The naive image baseline: the script a site would write instead of running the worker, a
// `clamdscan` of the upload (issue 23: a site scans what it receives, and the worker does) and then one
// `vips thumbnail` process per variant, each from the original file. It comes in two forms:
//
//   - default: as a user writes it, `vips thumbnail IN OUT.webp[Q=q] SIZE --height SIZE --size down`
//     with libvips' own threading (a thread pool as large as the machine's cores) and its default
//     WebP options (effort 4, no smart subsampling), two processes at a time on 2 cores. This is the
//     bar of issues 13 and 23.
//   - restricted: the same script held to the worker's own settings, `VIPS_CONCURRENCY=1` and the
//     worker's effort, which no one writing such a script would do; kept to show what the settings
//     alone are worth.
//
// The scan goes to the clamd the compared worker uses (clamdscan.go); the default form also runs
// without it (no scan), the bar before issue 23, so the old comparison stays visible.
//
// Neither asks for --export-profile srgb: on a file without an ICC profile libvips 8.14 then runs a
// colour transform that shifts colours and costs CPU (transcoder/vips/shim.c), and the worker no
// longer does it either.

type vipsVariant struct {
	quality string
	size, q int
}

func vipsVariants(cfg transcoder.ImageConfig) []vipsVariant {
	return []vipsVariant{{"high", cfg.High, cfg.QualityHigh}, {"medium", cfg.Medium, cfg.QualityMedium}, {"low", cfg.Low, cfg.QualityLow}}
}

// naiveScript is one form of the naive script.
type naiveScript struct {
	name   string // the method's name in the tables
	effort int    // -1: libvips' default
	// restricted sets VIPS_CONCURRENCY=1.
	restricted bool
	// scan, when set, is the clamd the script's clamdscan asks before the vips runs; nil: no scan.
	scan *clamdScan
}

// naiveScripts are the forms the throughput comparison times: the default script scanning with the
// worker's clamd (deploy) and with the fuzzy-hash clamd (ClamAV's default), without a scan (the old
// bar), and the restricted one scanning with the worker's clamd.
func naiveScripts(deploy, fuzzy *clamdScan) (def, fuzzyDef, noScan, restricted naiveScript) {
	effort := transcoder.DefaultImageConfig().Effort
	return naiveScript{name: "naive default", effort: -1, scan: deploy},
		naiveScript{name: "naive default, clamd with fuzzy hash", effort: -1, scan: fuzzy},
		naiveScript{name: "naive default, no scan", effort: -1},
		naiveScript{name: "naive restricted", effort: effort, restricted: true, scan: deploy}
}

// args is the vips command line for one variant.
func (n naiveScript) args(src, out string, v vipsVariant) []string {
	opts := fmt.Sprintf("Q=%d", v.q)
	if n.effort >= 0 {
		opts += fmt.Sprintf(",effort=%d", n.effort)
	}
	return []string{"thumbnail", src, fmt.Sprintf("%s[%s]", out, opts),
		strconv.Itoa(v.size), "--height", strconv.Itoa(v.size), "--size", "down"}
}

// env is the processes' environment: PATH and HOME only, so nothing of the benchmark's own
// environment (a VIPS_* variable) leaks in.
func (n naiveScript) env() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if n.restricted {
		env = append(env, "VIPS_CONCURRENCY=1")
	}
	return env
}

// commandLines is the script for one image, for the report.
func (n naiveScript) commandLines(cfg transcoder.ImageConfig) []string {
	var lines []string
	if n.scan != nil {
		lines = append(lines, n.scan.commandLine("IN.jpg")+"    # exit 1 (found) or 2 (error) stops the script")
	}
	for _, v := range vipsVariants(cfg) {
		lines = append(lines, n.commandLine(v))
	}
	return lines
}

// commandLine is the script's vips command for one variant, for the report.
func (n naiveScript) commandLine(v vipsVariant) string {
	prefix := ""
	if n.restricted {
		prefix = "VIPS_CONCURRENCY=1 "
	}
	line := prefix + "vips"
	for _, a := range n.args("IN.jpg", "OUT/"+v.quality+".webp", v) {
		line += " " + a
	}
	return line
}
