package main

import (
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/app"
)

// A refused memory budget is told in the words a person sets it with, and a size like 256MiB is read.
func TestMaxMemorySetting(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.MaxMemory = 16 << 20
	got := withFlags(cfg.Validate().Error())
	if !strings.Contains(got, "max memory (--max-memory, MW_MAX_MEMORY, limits.max_memory) 16777216 bytes") {
		t.Errorf("refusal told as %q; want it to name --max-memory, MW_MAX_MEMORY and limits.max_memory", got)
	}
	var n int64
	if err := (bytesFlag{&n}).Set("256MiB"); err != nil || n != 256<<20 {
		t.Errorf("--max-memory 256MiB: %d, %v", n, err)
	}
}
