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

func TestWatchersSeeEveryMoveBesideTheListener(t *testing.T) {
	var fractions []float64
	var a, b int
	ctx := With(context.Background(), func(f float64) { fractions = append(fractions, f) })
	ctx = Watch(ctx, func() { a++ })
	inner := Watch(ctx, func() { b++ })
	// A listener set below the watchers replaces only the listener.
	inner = With(inner, func(f float64) { fractions = append(fractions, -f) })
	Report(inner, 0.25)
	Moved(inner)
	Report(ctx, 0.5) // the outer context knows only the first watcher and its own listener
	if a != 3 || b != 2 {
		t.Errorf("watchers called %d and %d times, want 3 and 2", a, b)
	}
	if len(fractions) != 2 || fractions[0] != -0.25 || fractions[1] != 0.5 {
		t.Errorf("listeners got %v, want [-0.25 0.5] (Moved tells no listener)", fractions)
	}
	Moved(context.Background()) // nobody watching: no panic
}
