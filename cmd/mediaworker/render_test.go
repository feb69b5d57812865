package main

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The render child as the worker starts it: the built binary, hidden from the help.
func TestRenderDocumentCommand(t *testing.T) {
	dir := t.TempDir()
	svg := `<svg xmlns="http://www.w3.org/2000/svg" width="30" height="20"><rect width="30" height="20" fill="#0a0"/></svg>`
	if err := os.WriteFile(filepath.Join(dir, "input"), []byte(svg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr, _ := execWorker(t, nil, "render-document", "--in="+filepath.Join(dir, "input"),
		"--out="+filepath.Join(dir, "page.png"), "--scratch="+dir, "--format=svg", "--size=300", "--max-pixels=1000000")
	if code != 0 {
		t.Fatalf("render-document exited %d: %s", code, stderr)
	}
	var res struct {
		Pages, Width, Height int
		Confinement          string
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("reading %q: %v", stdout, err)
	}
	if res.Pages != 1 || res.Width != 300 || res.Height != 200 || !strings.Contains(res.Confinement, "landlock") {
		t.Errorf("result = %+v, want 1 page of 300 × 200 rendered under Landlock", res)
	}
	f, err := os.Open(filepath.Join(dir, "page.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width != 300 || cfg.Height != 200 {
		t.Errorf("page.png: %+v, %v; want a 300 × 200 PNG", cfg, err)
	}
	_, help, _, _ := execWorker(t, nil, "--help")
	if strings.Contains(help, "render-document") {
		t.Errorf("the help lists the internal render-document command:\n%s", help)
	}
}
