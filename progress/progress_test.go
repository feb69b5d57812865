package progress

import (
	"context"
	"testing"
	"time"
)

func TestReportAndThrottle(t *testing.T) {
	Report(context.Background(), 0.5) // nobody listening: no panic
	var got []float64
	ctx := With(context.Background(), Throttle(time.Hour, func(f float64) { got = append(got, f) }))
	for _, f := range []float64{0.1, 0.2, 0.3, 1.5, 1} {
		Report(ctx, f)
	}
	if len(got) != 2 || got[0] != 0.1 || got[1] != 1 {
		t.Fatalf("got %v, want the first report and the final 1 (clamped, once)", got)
	}
}
