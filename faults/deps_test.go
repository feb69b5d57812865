package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
)

// submitImages uploads n small JPEGs and publishes a request for each.
func submitImages(t *testing.T, c *client, n int, w, h int) []string {
	t.Helper()
	src := testenv.MakeJPEG(t, t.TempDir(), w, h)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = c.submit(src, fmt.Sprintf("u%d/photo.jpg", i))
	}
	return ids
}

// expectSuccess checks that each id has exactly one response in the stream and that it is a success.
func expectSuccess(t *testing.T, l *ledger, ids []string) {
	t.Helper()
	for _, id := range ids {
		if r := l.one(id); !r.Success {
			t.Errorf("%s: %+v, want success", id, r)
		}
	}
}

// imagesOnANATSProcess starts a worker on a nats-server process the test can stop and start, and
// submits n 1600×1200 photos to it.
func imagesOnANATSProcess(t *testing.T, n int) (*testenv.NATSProc, *ledger, []string) {
	t.Helper()
	np := testenv.StartNATSProc(t)
	startWorker(t, "a", workerOpts{natsURL: np.URL, clamd: testenv.StartClamd(t)})
	l := newLedger(t, np.URL)
	return np, l, submitImages(t, newClient(t, l, nil, 1), n, 1600, 1200)
}

// The NATS server (a separate process, file storage, fixed port) goes away while requests are in
// flight and comes back on the same store: every request still gets exactly one response.
func TestNATSRestartLosesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*testenv.NATSProc)
	}{
		{"graceful restart", (*testenv.NATSProc).Stop},
		{"crash", (*testenv.NATSProc).Kill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np, l, ids := imagesOnANATSProcess(t, 20)

			// Restart while some are answered and the rest are queued or in flight.
			testenv.Eventually(t, 60*time.Second, func() error {
				if err := l.sync(); err != nil {
					return err
				}
				if n := l.total(); n < 3 {
					return fmt.Errorf("%d responses so far", n)
				}
				return nil
			})
			before := l.total()
			tc.stop(np)
			time.Sleep(5 * time.Second) // the outage: longer than a publish retry hides
			np.Start()
			t.Logf("restarted nats-server after %d of %d responses", before, len(ids))
			if before == len(ids) {
				t.Fatal("every request was answered before the restart; the test proves nothing")
			}

			l.await(ids, 2*time.Minute)
			expectSuccess(t, l, ids)
			l.awaitEmptyQueue(30 * time.Second)
			dupes := l.republished(ids)
			t.Logf("%d requests answered once each in the stream, %d deliveries; %d republished on the wire across the restart",
				len(ids), l.deliveries(), dupes)
		})
	}
}

// The NATS server goes away eight times in half a minute, stopped or killed, each time for one to
// four seconds, while 60 requests are worked on: each restart is another chance to catch a request
// mid-call. A Put's bucket lookup whose reply was lost at a shutdown once held its job for the job's
// whole deadline; one restart a run caught that about once in a hundred runs, these eight about once
// in two.
func TestNATSRestartsOneAfterAnother(t *testing.T) {
	np, l, ids := imagesOnANATSProcess(t, 60)
	for r := range 8 {
		// A fixed schedule of uneven gaps, so the restarts fall on different steps of the jobs.
		time.Sleep(time.Duration(700+r*371%1500) * time.Millisecond)
		if r == 0 {
			if err := l.sync(); err != nil {
				t.Fatal(err)
			}
			if l.total() == len(ids) {
				t.Fatal("every request was answered before the first restart; the test proves nothing")
			}
		}
		if r%3 == 2 {
			np.Kill()
		} else {
			np.Stop()
		}
		time.Sleep(time.Duration(1000+r*533%3000) * time.Millisecond)
		np.Start()
	}
	l.await(ids, 2*time.Minute)
	expectSuccess(t, l, ids)
	l.awaitEmptyQueue(30 * time.Second)
	t.Logf("%d requests answered once each across 8 restarts, %d deliveries", len(ids), l.deliveries())
}

// clamd goes away for 10 s: jobs wait (nothing is transformed or answered unscanned, an infected upload
// is not let through), and everything completes once it is back.
func TestClamdOutageWaitsNeverUnscanned(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd,
		args: []string{"--backoff-base", "500ms", "--backoff-max", "2s", "--max-deliver", "20"}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)

	clamd.Stop()
	ids := submitImages(t, c, 4, 640, 480)
	eicar := c.submit(writeFile(t, t.TempDir(), "e.jpg", []byte(testenv.EICAR)), "u/e.jpg")
	window(t, 10*time.Second, func() error {
		if err := l.sync(); err != nil {
			return nil // a slow read is not the fault under test
		}
		if n := l.total(); n > 0 {
			return fmt.Errorf("%d responses while clamd was down", n)
		}
		for i, id := range ids {
			k := contracts.KeysFor(contracts.Request{S3Key: fmt.Sprintf("u%d/photo.jpg", i), MediaID: id})
			if c.exists(k.Image("low")) {
				return fmt.Errorf("%s was transformed while clamd was down", id)
			}
		}
		return nil
	})
	clamd.Start()

	l.await(append(ids, eicar), 2*time.Minute)
	expectSuccess(t, l, ids)
	if r := l.one(eicar); r.Success || r.Error != "virus detected: "+testenv.EICARSignature {
		t.Errorf("EICAR uploaded during the outage: %+v, want a virus failure", r)
	}
	l.awaitEmptyQueue(30 * time.Second)
	// Whether the outage cost retries depends on who noticed first: a job whose scan failed is retried,
	// while once the dependency watcher has seen clamd down no job is pulled at all. Both are right; the
	// window above is what shows the wait.
	t.Logf("image lane delivered %d for %d requests", l.lane(pipeline.Image).Delivered.Consumer, len(ids)+1)
}

// The S3 server goes away for 10 s: the requests in hand are held while it is down (no retries spent, no hot
// loop) and succeed once it is back.
func TestS3OutageHoldsThenSucceeds(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	m := testenv.StartS3(t)
	const maxDeliver = 10
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m,
		args: []string{"--backoff-base", "1s", "--backoff-max", "4s", "--max-deliver", fmt.Sprint(maxDeliver)}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, m, 1)

	src := testenv.MakeJPEG(t, t.TempDir(), 640, 480)
	for i := range 4 {
		c.upload(src, fmt.Sprintf("u%d/photo.jpg", i))
	}
	m.Stop()
	var ids []string
	for i := range 4 {
		ids = append(ids, c.request(fmt.Sprintf("u%d/photo.jpg", i)))
	}
	window(t, 10*time.Second, func() error {
		if err := l.sync(); err != nil {
			return nil
		}
		if n := l.total(); n > 0 {
			return fmt.Errorf("%d responses while the S3 server was down", n)
		}
		return nil
	})
	mid := l.deliveries() // triage's retries: it stats the object
	m.Start()

	l.await(ids, 2*time.Minute)
	expectSuccess(t, l, ids)
	l.awaitEmptyQueue(30 * time.Second)
	if dl := l.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters after a 10 s outage", len(dl))
	}
	deliveries := l.deliveries() - uint64(len(ids)) // each request's one delivery in its lane
	// A request in hand when the store is found down is held until it is back, not retried: the outage
	// costs each request one delivery in triage, however long it lasts (backoff alone, 1 s, 2 s, 4 s, …,
	// would be about four each over 10 s; a Nak-at-once loop dozens). Then one more to be routed.
	if mid > uint64(len(ids)) || deliveries > uint64(len(ids)*2) {
		t.Errorf("%d deliveries during the outage and %d in all for %d requests; want one each during it (held, not retried) and at most two in triage",
			mid, deliveries, len(ids))
	}
	t.Logf("%d requests, %d deliveries (%d during the 10 s outage)", len(ids), deliveries, mid)
}

// Issue 10: an outage of a dependency the jobs need never consumes deliveries. With MaxDeliver 3 and a
// retry budget of about a second, clamd or the S3 server goes away for 12 s while photos are submitted: the worker
// stops pulling (its dependency watcher holds every lane), nothing is dead-lettered or answered during
// the outage, and when the dependency is back every photo succeeds, once. Before the watcher, each of
// these requests gave up after 3 deliveries.
func TestOutageLongerThanTheRetryBudgetDeadLettersNothing(t *testing.T) {
	for _, dep := range []string{"clamd", "s3"} {
		t.Run(dep, func(t *testing.T) {
			clamd := testenv.StartClamd(t)
			srv := testenv.StartNATS(t)
			m := testenv.StartS3(t)
			startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m,
				args: []string{"--max-deliver", "3", "--backoff-base", "200ms", "--backoff-max", "500ms"}})
			l := newLedger(t, srv.ClientURL())
			c := newClient(t, l, m, 1)

			src := testenv.MakeJPEG(t, t.TempDir(), 640, 480)
			for i := range 5 {
				c.upload(src, fmt.Sprintf("u%d/photo.jpg", i))
			}
			stop, start := clamd.Stop, clamd.Start
			if dep == "s3" {
				stop, start = m.Stop, m.Start
			}
			stop()
			var ids []string
			for i := range 5 {
				ids = append(ids, c.request(fmt.Sprintf("u%d/photo.jpg", i)))
			}
			// The outage outlasts the retry budget many times over.
			outage := time.Now().Add(12 * time.Second)
			for time.Now().Before(outage) {
				if err := l.sync(); err != nil {
					t.Fatal(err)
				}
				if n := l.total(); n != 0 {
					t.Fatalf("%d responses during the %s outage; want none until it is back:\n%s", n, dep, l.state())
				}
				if dls := l.deadLetters(); len(dls) != 0 {
					t.Fatalf("%d dead letters during the %s outage:\n%s", len(dls), dep, l.state())
				}
				time.Sleep(500 * time.Millisecond)
			}
			start()
			l.await(ids, 2*time.Minute)
			expectSuccess(t, l, ids)
			if dls := l.deadLetters(); len(dls) != 0 {
				t.Errorf("%d dead letters after the %s outage", len(dls), dep)
			}
			l.awaitEmptyQueue(30 * time.Second)
			t.Logf("%d photos through a 12 s %s outage with MaxDeliver 3: all succeeded, %d deliveries in all", len(ids), dep, l.deliveries())
		})
	}
}

// An infected upload is removed before the virus event is out. If the event cannot be published at that
// moment and the job were simply redelivered, the redelivery would find the object gone and answer "not
// found": the API would never hear of the virus. Here the event's subject is briefly not captured by
// any stream, so its publish fails right after the removal; the worker must keep the verdict (it retries
// the publish in place) until the stream takes it.
func TestVirusVerdictSurvivesAFailedEventPublish(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := l.js.Stream(ctx, streams.ResponsesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	full := info.Config
	cut := full
	cut.Subjects = []string{streams.Subjects().Response}
	if _, err := l.js.UpdateStream(ctx, cut); err != nil {
		t.Fatalf("taking %s off the responses stream: %v", streams.Subjects().Virus, err)
	}
	key := "u/eicar.jpg"
	id := c.submit(writeFile(t, t.TempDir(), "e.jpg", []byte(testenv.EICAR)), key)
	testenv.Eventually(t, 30*time.Second, func() error {
		if c.exists(key) {
			return errors.New("the infected object is still there")
		}
		return nil
	})
	if _, err := l.js.UpdateStream(ctx, full); err != nil {
		t.Fatalf("restoring the responses stream: %v", err)
	}

	l.await([]string{id}, time.Minute)
	r := l.one(id)
	l.mu.Lock()
	events := len(l.viruses[id])
	l.mu.Unlock()
	if r.Success || r.Error != "virus detected: "+testenv.EICARSignature || events != 1 {
		t.Fatalf("after the virus event's publish failed: response %+v and %d virus events; want \"virus detected\" and one event", r, events)
	}
}

// The same verdict, lost another way: the S3 server deletes the infected object but the reply never reaches
// the worker (the store crashed or the network cut at that moment), and the store stays unreachable for
// a second. The redelivery finds the object gone.
func TestVirusVerdictSurvivesALostDeleteReply(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	m := testenv.StartS3(t)
	proxy := startS3Proxy(t, m.Endpoint)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m, s3Addr: proxy.Endpoint()})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, m, 1)

	key := "u/eicar.jpg"
	proxy.armCutOnDelete()
	id := c.submit(writeFile(t, t.TempDir(), "e.jpg", []byte(testenv.EICAR)), key)
	testenv.Eventually(t, 30*time.Second, func() error {
		// The store's answer, not the DELETE passing the proxy: the server may not have read it yet then.
		if !proxy.deleteAnswered() {
			return errors.New("the worker has not deleted the infected object yet")
		}
		return nil
	})
	if c.exists(key) {
		t.Fatal("the S3 server still has the object after answering the DELETE")
	}
	time.Sleep(time.Second) // the store stays unreachable a moment: the worker's retries fail
	proxy.heal()

	l.await([]string{id}, time.Minute)
	r := l.one(id)
	l.mu.Lock()
	events := len(l.viruses[id])
	l.mu.Unlock()
	if r.Success || r.Error != "virus detected: "+testenv.EICARSignature || events != 1 {
		t.Fatalf("after the reply to the infected object's DELETE was lost: response %+v and %d virus events; "+
			"want \"virus detected\" and one virus event", r, events)
	}
}
