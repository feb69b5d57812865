package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A recipe's HLS rung without max_kbps takes a default by its height (it was refused), and `config`
// shows the cap in effect.
func TestRecipeHLSRungDefaultsItsBitrate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, []byte("recipes:\n  player:\n    video:\n      hls: {rungs: [{height: 1080}, {height: 720}, {height: 480, max_kbps: 900}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := cmdConfig(context.Background(), []string{"check", file}, &out, &errb); code != 0 {
		t.Fatalf("config check: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := cmdConfig(context.Background(), []string{"--config", file}, &out, &errb); code != 0 {
		t.Fatalf("config --config: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "hls 1080p≤6000kbps,720p≤3000kbps,480p≤900kbps") {
		t.Errorf("config does not show the rungs' caps in effect:\n%s", out.String())
	}
}
