package transcoder_test

import (
	"context"
	"sync"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/progress"
	"github.com/mediaworker/mediaworker/transcoder"
)

func TestTranscodeReportsProgress(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	src := testenv.MakeVideo(t, dir, "p.mov", testenv.VideoOpts{Width: 640, Height: 360, Seconds: 4, FPS: 25, ACodec: "aac"})
	var mu sync.Mutex
	var got []float64
	ctx := progress.With(context.Background(), func(f float64) {
		mu.Lock()
		got = append(got, f)
		mu.Unlock()
	})
	if _, err := v.Transform(ctx, src, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 2 || got[len(got)-1] != 1 {
		t.Fatalf("progress reports %v: want several, ending at 1", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("progress went backwards: %v", got)
		}
	}
}
