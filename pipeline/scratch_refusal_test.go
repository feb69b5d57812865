package pipeline

import (
	"strings"
	"testing"
)

// A job refused for scratch space tells the operator (the log, the dead letter's last error) which
// settings to change; the API's answer names none of the worker's settings or paths.
func TestScratchRefusalNamesTheSettings(t *testing.T) {
	f := newFixture(t)
	f.cfg.MinFreeBytes = 1 << 62
	out := f.run(t)
	if out.Kind != Retry || out.Err == nil {
		t.Fatalf("kind %s, err %v; want a retry", out.Kind, out.Err)
	}
	for _, want := range []string{"--tmp-dir", "MW_TMP_DIR", "--scratch-min-free", "MW_SCRATCH_MIN_FREE"} {
		if !strings.Contains(out.Err.Error(), want) {
			t.Errorf("the operator's error does not name %s: %v", want, out.Err)
		}
	}
	if strings.Contains(out.Response.Error, "--") || strings.Contains(out.Response.Error, f.cfg.TmpDir) {
		t.Errorf("the API's error names the worker's settings or paths: %q", out.Response.Error)
	}
}
