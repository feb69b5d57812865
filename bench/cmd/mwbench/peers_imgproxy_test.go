package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// An imgproxy that cannot be built leaves one targets row saying why, which the report writes and a
// later -merge reads back: a go build's output has many lines and may hold '|', either of which would
// break the table.
func TestImgproxyNotBuiltRow(t *testing.T) {
	b := &bencher{rep: &Report{Started: time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)}, parallel: 2}
	why := errors.New("building imgproxy v3.31.4: go build: exit status 1\n# github.com/imgproxy/imgproxy/v3/vips\nvips.c:5: error: a | b\n" +
		strings.Repeat("more output ", 100))
	b.imgproxyReport(nil, why, nil, 40, 2, "", "", 0)
	if len(b.rep.Rows) != 1 || b.rep.Rows[0].What != "imgproxy: not measured" {
		t.Fatalf("rows %+v, want one imgproxy: not measured", b.rep.Rows)
	}
	m := b.rep.Rows[0].Measured
	if !strings.HasPrefix(m, "building imgproxy v3.31.4: go build: exit status 1 # github.com") || strings.ContainsAny(m, "|\n") || len(m) > 310 {
		t.Errorf("measured cell %q: want the error's start on one line, no pipe, at most ~300 bytes", m)
	}
	r, err := parseReport(b.rep.Markdown())
	if err != nil {
		t.Fatalf("the report with the row does not read back: %v", err)
	}
	if len(r.Rows) != 1 || r.Rows[0] != b.rep.Rows[0] {
		t.Errorf("read back %+v, want %+v", r.Rows, b.rep.Rows)
	}
}
