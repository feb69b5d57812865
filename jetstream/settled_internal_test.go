package jetstream

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// Triage records "routed" after it published the lane's copy, so a fast lane can record "final" first.
// The later "routed" must not overwrite it: a late duplicate of the lane's copy would run again.
func TestSettledRoutedNeverOverwritesFinal(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartNATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	m := &settledMemory{js: js, cfg: DefaultConfig()}
	ctx := t.Context()
	// apply records with rememberSoon, without waiting for each write. A "routed" refused because
	// "final" is there is the rule at work, not a lost write.
	var lost atomic.Int32
	for _, step := range []struct {
		seq   uint64
		state string
	}{{1, settledFinal}, {1, settledRouted}, {2, settledRouted}, {2, settledFinal}, {3, settledFinal}, {3, settledRouted}, {4, settledRouted}, {4, settledFinal}} {
		if err := m.rememberSoon(ctx, step.seq, step.state, 10*time.Second, func() { lost.Add(1) }); err != nil {
			t.Fatalf("rememberSoon(%d, %s): %v", step.seq, step.state, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("the asynchronous records were not acknowledged within 10 s")
	}
	for seq, want := range map[uint64]string{1: settledFinal, 2: settledFinal, 3: settledFinal, 4: settledFinal} {
		if got, _, err := m.recall(ctx, seq); err != nil || got != want {
			t.Errorf("request %d: %q %v, want %q", seq, got, err, want)
		}
	}
	// Every future is settled by now; give their watchers a moment to count.
	for range 100 {
		runtime.Gosched()
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("%d records counted as lost; the refused \"routed\" is by design and the rest were stored", n)
	}
}
