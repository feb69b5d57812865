package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/contracts"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

// submit's progress for a file never goes back: a recipe's video reports each ffmpeg run from its
// start (the MP4 to 100 %, then the renditions from 0), and a late report may arrive after a newer one.
func TestSubmitProgressNeverGoesBack(t *testing.T) {
	var out, status bytes.Buffer
	w := newWaiter(&out, &status)
	const id = "11111111-1111-4111-8111-111111111111"
	w.expect(id, "clip.mov")
	for _, pct := range []float64{10, 55, 100, 3, 40, 100, 120, -5} {
		data, _ := json.Marshal(contracts.Progress{MediaID: id, Percent: pct})
		w.onAnswer(natsjs.Answer{Kind: natsjs.AnswerProgress, Data: data})
	}
	got := strings.Split(strings.TrimSpace(status.String()), "\n")
	want := []string{"progress clip.mov 10%", "progress clip.mov 55%", "progress clip.mov 100%"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("progress lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
