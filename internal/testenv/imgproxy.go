package testenv

import "time"

// ImgproxyVersion is the github.com/imgproxy/imgproxy/v3 version the benchmark runs beside the worker
// (mwbench's peers phase, issue 37): the one the issue measured, built against the machine's libvips
// (libvips-dev, as the worker's transcoder/vips is).
const ImgproxyVersion = "v3.31.4"

// imgproxyBuildTimeout bounds a cold build (module downloads and cgo included).
const imgproxyBuildTimeout = 25 * time.Minute

// EnsureImgproxy returns the path of the cached imgproxy binary at ImgproxyVersion, building it from
// the Go module proxy first if needed. imgproxy's go.mod has a replace directive, which `go install
// pkg@version` refuses, so it is built in its downloaded source as its own main module (goTool.module).
// A cold build took 9 min 47 s of wall time and 4 min of CPU on the project's 2 shared, busy cores, the
// module downloads most of the wait; from Go's build cache, 10 s. A file lock makes parallel callers
// wait for one build.
func EnsureImgproxy(logf func(format string, args ...any)) (string, error) {
	return goTool{what: "imgproxy", pkg: "github.com/imgproxy/imgproxy/v3", module: "github.com/imgproxy/imgproxy/v3",
		version: ImgproxyVersion, cache: "imgproxy", file: "imgproxy", timeout: imgproxyBuildTimeout}.ensure(logf)
}
