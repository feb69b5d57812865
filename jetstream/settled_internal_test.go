package jetstream

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The records apply sends without waiting are stored, and none counts as lost.
func TestRememberSoonStoresFinal(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartNATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	m := newSettledMemory(js, DefaultConfig())
	ctx := t.Context()
	var lost atomic.Int32
	for seq := uint64(1); seq <= 4; seq++ {
		if err := m.rememberSoon(ctx, seq, settledFinal, 10*time.Second, func() { lost.Add(1) }); err != nil {
			t.Fatalf("rememberSoon(%d): %v", seq, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("the asynchronous records were not acknowledged within 10 s")
	}
	for seq := uint64(1); seq <= 4; seq++ {
		if got, _, err := m.recall(ctx, seq); err != nil || got != settledFinal {
			t.Errorf("request %d: %q %v, want %q", seq, got, err, settledFinal)
		}
	}
	// Every future is settled by now; give their watchers a moment to count.
	for range 100 {
		runtime.Gosched()
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("%d records counted as lost", n)
	}
}
