package main

import "testing"

func TestStageDeltas(t *testing.T) {
	const sum, count = "mediaworker_stage_duration_seconds_sum", "mediaworker_stage_duration_seconds_count"
	before := map[string]float64{
		sum + `{kind="video",stage="scanning"}`: 1.0, count + `{kind="video",stage="scanning"}`: 4,
		sum + `{kind="unknown",stage="scanning"}`: 0.5, count + `{kind="unknown",stage="scanning"}`: 2,
	}
	after := map[string]float64{
		sum + `{kind="video",stage="scanning"}`: 1.3, count + `{kind="video",stage="scanning"}`: 5,
		sum + `{kind="unknown",stage="scanning"}`: 0.5, count + `{kind="unknown",stage="scanning"}`: 2,
		sum + `{kind="video",stage="detecting"}`: 0.02, count + `{kind="video",stage="detecting"}`: 1, // first time seen
		`go_goroutines`: 80,
	}
	st := stageDeltas(before, after)
	if len(st) != 2 || st["scanning"] == nil || st["detecting"] == nil {
		t.Fatalf("stages %v, want scanning and detecting", st)
	}
	if s := st["scanning"]; s.count != 1 || s.sum < 0.299 || s.sum > 0.301 {
		t.Errorf("scanning %+v, want one job of 0.3 s (both kinds summed, only what changed)", *s)
	}
	if d := st["detecting"]; d.count != 1 || d.sum != 0.02 {
		t.Errorf("detecting %+v, want one job of 0.02 s", *d)
	}
}
