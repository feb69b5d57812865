package jetstream

import (
	"testing"
	"time"
)

// Issue 10: the default retry schedule rides out a 10-minute outage of one dependency. The delays
// between the deliveries (jitter at its most unlucky: the smallest of many draws) must add up to more.
func TestDefaultBackoffRidesOutTenMinutes(t *testing.T) {
	cfg, wcfg := DefaultConfig(), DefaultWorkerConfig()
	var total time.Duration
	for d := uint64(1); d < uint64(cfg.MaxDeliver); d++ {
		least := time.Duration(1<<63 - 1)
		for range 500 {
			least = min(least, wcfg.backoff(d))
		}
		total += least
	}
	if total < 10*time.Minute {
		t.Fatalf("the default deliveries span only %s of retries, want ≥ 10m", total)
	}
	t.Logf("default retry span: %s over %d deliveries", total.Round(time.Second), cfg.MaxDeliver)
}
