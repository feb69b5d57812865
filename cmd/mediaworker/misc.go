package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/mediaworker/mediaworker/transcoder"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("version", "Print the version of mediaworker, the Go runtime and libvips (which the worker loads at its\nfirst image; this loads it now, so a missing or broken libvips shows here: exit 1).", "")
	if _, code, ok := parseOrUsage(c, args, stdout, stderr); !ok {
		return code
	}
	v := version
	if v == "dev" {
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	lib, err := transcoder.LibvipsVersion()
	if err != nil {
		fmt.Fprintf(stdout, "mediaworker %s (%s, %s/%s)\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		fmt.Fprintf(stderr, "mediaworker version: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "mediaworker %s (%s, %s/%s, libvips %s)\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH, lib)
	return exitOK
}

func cmdHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("healthcheck", "Ask a running worker whether it is ready (GET /health/ready); exit 0 if so, 1 if not.", "")
	addr := "127.0.0.1:8080"
	timeout := 5 * time.Second
	c.fs.StringVar(&addr, "http-addr", addr, "the worker's --http-addr")
	durationVar(c.fs, &timeout, "timeout", "how long to wait for an answer")
	if _, code, ok := parseOrUsage(c, args, stdout, stderr); !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health/ready", nil)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker healthcheck: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker healthcheck: %v\n", err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "not ready (%s): %s", resp.Status, body)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s", body)
	return exitOK
}
