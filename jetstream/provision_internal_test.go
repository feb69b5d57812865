package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
)

// Issue 31 item 10: instances that start together on a fresh 3-node cluster all provision the R3
// streams, consumers and buckets at the same moment. Each finishes, and finds everything in place.
// (Create-or-update from several clients at once left them unanswered: every start failed or hung.)
func TestProvisionTogetherOnAFreshCluster(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Replicas = 3
	for round := 1; round <= 3; round++ {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			cl := testenv.StartCluster(t, 3)
			const instances = 3
			jss := make([]jetstream.JetStream, instances)
			for i := range jss {
				nc, err := nats.Connect(cl.URLs())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				js, err := jetstream.New(nc)
				if err != nil {
					t.Fatal(err)
				}
				jss[i] = js
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			errs := make([]error, instances)
			var wg sync.WaitGroup
			for i, js := range jss {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if errs[i] = Provision(ctx, js, cfg); errs[i] == nil {
						errs[i] = ProvisionReuse(ctx, js, cfg, DefaultReuseConfig())
					}
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("instance %d: %v", i+1, err)
				}
			}
			t.Logf("%d instances provisioned together in %s", instances, time.Since(start).Round(time.Millisecond))
			for _, name := range []string{cfg.RequestsStream(), cfg.ResponsesStream(), cfg.DLQStream(), cfg.AdvisoryCapture().Stream(),
				"KV_" + cfg.Buckets().Settled(), "KV_" + cfg.Buckets().Verdicts(), "KV_" + cfg.Buckets().Reuse()} {
				s, err := jss[0].Stream(ctx, name)
				if err != nil {
					t.Errorf("stream %s: %v", name, err)
				} else if r := s.CachedInfo().Config.Replicas; r != 3 {
					t.Errorf("stream %s has %d replicas, want 3", name, r)
				}
			}
		})
	}
}

// Provisioning sends an update only where something changed (an update meeting another instance's
// create is what hangs), and still applies a change.
func TestProvisionUpdatesOnlyWhatChanged(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartNATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cfg := DefaultConfig()
	cfg.MaxQueued = 100
	rc := DefaultReuseConfig()
	if err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if err := ProvisionReuse(ctx, js, cfg, rc); err != nil {
		t.Fatal(err)
	}
	for _, sc := range cfg.StreamConfigs() {
		s, err := js.Stream(ctx, sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !streamCurrent(s.CachedInfo().Config, sc) {
			t.Errorf("stream %s as created does not count as current: every start would update it", sc.Name)
		}
	}
	for _, kc := range []jetstream.KeyValueConfig{cfg.Buckets().settledConfig(), cfg.Buckets().verdictConfig(), cfg.Buckets().reuseConfig(rc)} {
		s, err := js.Stream(ctx, "KV_"+kc.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if !bucketCurrent(s.CachedInfo().Config, kc) {
			t.Errorf("bucket %s as created does not count as current: every start would update it", kc.Bucket)
		}
	}

	cfg.MaxQueued, rc.TTL = 7, 2*time.Hour
	if err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if err := ProvisionReuse(ctx, js, cfg, rc); err != nil {
		t.Fatal(err)
	}
	if s, err := js.Stream(ctx, cfg.RequestsStream()); err != nil {
		t.Fatal(err)
	} else if got := s.CachedInfo().Config.MaxMsgsPerSubject; got != 7 {
		t.Errorf("requests stream's max msgs per subject %d after provisioning --max-queued 7", got)
	}
	if s, err := js.Stream(ctx, "KV_"+cfg.Buckets().Reuse()); err != nil {
		t.Fatal(err)
	} else if got := s.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Errorf("reuse bucket's TTL %s after provisioning --reuse-ttl 2h", got)
	}
}

// A memory whose JetStream does not answer fails within memoryTimeout, for every job asking at once,
// however long the jobs may run: they go the long way (or are handed back) instead of queueing behind
// one another on the bucket's lock for as long as their deadline.
func TestMemoriesThatDoNotAnswerFailFast(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartNATS(t))
	// A JetStream API that swallows every request: a cluster busy creating the bucket, as far as the
	// worker can tell.
	if _, err := nc.Subscribe("mute.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.NewWithAPIPrefix(nc, "mute")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	reuse, verdicts, settled := NewReuseMemory(js, cfg, DefaultReuseConfig()), NewVerdicts(js, cfg), newSettledMemory(js, cfg)
	jobCtx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	calls := map[string]func() error{
		"reuse lookup":   func() error { _, err := reuse.Lookup(jobCtx, "k"); return err },
		"reuse remember": func() error { return reuse.Remember(context.WithoutCancel(jobCtx), "k", pipeline.Reused{}) },
		"verdict recall": func() error { _, err := verdicts.Recall(jobCtx, "m"); return err },
		"settled recall": func() error { _, _, err := settled.recall(jobCtx, 1); return err },
	}
	start := time.Now()
	var wg sync.WaitGroup
	for name, call := range calls {
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				err := call()
				if err == nil {
					t.Errorf("%s %d: no error from a JetStream that does not answer", name, i)
				} else if !errors.Is(err, context.DeadlineExceeded) {
					t.Logf("%s %d: %v", name, i, err)
				}
				if took := time.Since(t0); took > memoryTimeout+5*time.Second {
					t.Errorf("%s %d: took %s, want about memoryTimeout (%s)", name, i, took.Round(time.Millisecond), memoryTimeout)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d calls failed in %s", 3*len(calls), time.Since(start).Round(time.Millisecond))
}
