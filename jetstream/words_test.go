package jetstream_test

import (
	"strings"
	"testing"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/rs/zerolog"
)

// Issue 32: the worker tells a job's errors in the words it is handed (jetstream imports nothing of
// the pipeline). A worker built without them would have no words for a request it gives up: it is
// refused at construction, naming the setting, before it takes any work.
func TestNewWorkerNeedsTheErrorWords(t *testing.T) {
	_, err := natsjs.NewWorker(nil, natsjs.DefaultConfig(), natsjs.DefaultWorkerConfig(), nil, nil, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "WorkerConfig.Words") {
		t.Fatalf("NewWorker without Words: got %v, want an error naming WorkerConfig.Words", err)
	}
}
