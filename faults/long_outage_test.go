package faults

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// longOutage is how long clamd is down in the middle of the full run: issue 10 asks that the retry
// defaults ride out a 10-minute outage of one dependency. The full run (500 requests, about longOutage + 4
// minutes) is opted into with MW_FAULTS_LONG_OUTAGE=1; by default, and in CI, the same test runs 60
// requests through a 30 s outage (about 2 minutes).
const longOutage = 10 * time.Minute

// Issue 10: the 500-request accounting run with the default retry settings, a 10-minute clamd outage
// in the middle and lost acks. Both workers are frozen (SIGSTOP) the moment a response reaches the
// wire, so the job that published it, and any other that had, has not been acked; they are then
// SIGKILLed and restarted, and clamd goes down. Their redeliveries are pulled only when clamd is back,
// long after the streams' 2-minute duplicate window: only the settled-requests memory keeps them from
// storing a second outcome. Every request must end in exactly one outcome that fits its input, none of
// them "gave up".
func TestAccountingThroughALongClamdOutageAndLostAcks(t *testing.T) {
	// The whole test, set-up included, ends within outage + 4½ minutes (14½ at the real length); each
	// phase waits only for what is left of that, and a timeout fails with the streams' state.
	total, outage := 60, 30*time.Second
	if os.Getenv("MW_FAULTS_LONG_OUTAGE") == "1" && !testing.Short() {
		total, outage = 500, longOutage
	}
	deadline := time.Now().Add(outage + 4*time.Minute + 30*time.Second)
	seed := uint64(time.Now().UnixNano())
	rng := mrand.New(mrand.NewPCG(seed, 0))
	t.Logf("%d requests, %s clamd outage, seed %d", total, outage, seed)

	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	m := testenv.StartS3(t)
	// The product's retry defaults (the harness shrinks them for the other tests): the point is that
	// they ride out the outage without dead-lettering anything.
	sc, wc := natsjs.DefaultConfig(), natsjs.DefaultWorkerConfig()
	opts := workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m, args: []string{
		"--ack-wait", sc.AckWait.String(), "--max-deliver", fmt.Sprint(sc.MaxDeliver),
		"--backoff-base", wc.BackoffBase.String(), "--backoff-max", wc.BackoffMax.String()}}
	workers := []*workerProc{startWorker(t, "a", opts), startWorker(t, "b", opts)}
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, m, 1)
	reqs, payloads := prepareRequests(t, c, rng, total)
	began := time.Now()

	// Phase 1: 40 % with everything up, until work is flowing.
	first, second := total*2/5, total*4/5
	for i := range first {
		c.publish(payloads[i], reqs[i].id)
	}
	testenv.Eventually(t, min(3*time.Minute, time.Until(deadline)-outage), func() error {
		if err := l.sync(); err != nil {
			return err
		}
		if n := l.total(); n < first/10 {
			return fmt.Errorf("%d responses of the first %d requests", n, first)
		}
		return nil
	})

	// The lost acks: freeze both workers as soon as a response is on the wire. The worker that
	// published it has yet to record the settlement and ack, or has recorded it and not acked, or (rarely)
	// has acked already; the freeze is kept when the request is still in the work queue, and otherwise the
	// workers are thawed and the next response is tried. Both kept cases must end in one outcome: a
	// recorded settlement is acked without running again; one frozen between its publish and its record
	// is finished from the outbox it recorded before publishing (jetstream/outbox.go). Before the outbox,
	// the second case stored a second outcome once the duplicate window had passed.
	pids := []int{workers[0].pid(), workers[1].pid()}
	signalAll := func(sig syscall.Signal) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	var armed, stopped atomic.Bool
	// Registered after the workers' clean-ups, so it runs before them: a failure while frozen still
	// gets their /health and goroutine dumps.
	t.Cleanup(func() {
		if stopped.Load() {
			signalAll(syscall.SIGCONT)
		}
	})
	frozen := make(chan []byte, 1)
	sub, err := l.nc.Subscribe(streams.Subjects().Response, func(msg *nats.Msg) {
		if armed.CompareAndSwap(true, false) {
			stopped.Store(true)
			signalAll(syscall.SIGSTOP)
			frozen <- append([]byte(nil), msg.Data...)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	const attempts = 200
	var answered []byte
	freezeBy := time.Now().Add(2 * time.Minute)
	next, chunk := first, max((second-first)/10, 1)
	for try := 1; ; try++ {
		if next < second {
			// Keep responses coming: phase 1's requests may all be answered before a freeze is kept.
			c.publish(payloads[next], reqs[next].id)
			next++
		}
		armed.Store(true)
		select {
		case answered = <-frozen:
		case <-time.After(time.Until(freezeBy)):
			t.Fatalf("no response to freeze the workers on within 2 minutes (%d attempts):\n%s", try, l.state())
		}
		// An ack sent just before the freeze may still be on its way to the server: the request must
		// stay queued for a while to count as lost.
		lost := stillQueued(t, l, dlqID(answered))
		for end := time.Now().Add(2 * time.Second); lost && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			lost = stillQueued(t, l, dlqID(answered))
		}
		if lost {
			t.Logf("attempt %d: froze both workers after response %s was published and before it was acked", try, clip(answered))
			break
		}
		signalAll(syscall.SIGCONT)
		stopped.Store(false)
		if try == attempts {
			t.Fatalf("in %d attempts the workers always acked before the freeze: no lost ack to test", attempts)
		}
	}
	_ = sub.Unsubscribe()
	if err := l.sync(); err != nil {
		t.Fatal(err)
	}
	answeredAtFreeze := l.total()

	// Phase 2: the frozen workers are killed and restarted (start-up waits for clamd, so before the
	// outage), then clamd goes away. The lost acks' redeliveries come an AckWait after the freeze, by
	// when the workers have seen clamd down and pull nothing until it is back.
	for _, w := range workers {
		w.kill()
	}
	stopped.Store(false)
	for _, w := range workers {
		w.start()
	}
	clamd.Stop()
	outageBegan := time.Now()
	t.Logf("%d responses in the stream at the freeze; SIGKILLed and restarted both workers; clamd down", answeredAtFreeze)

	// 40 % more arrive during the outage; nothing may give up or be dead-lettered meanwhile (only the
	// unparseable requests belong in the DLQ).
	unparseable := map[string]bool{}
	for _, r := range reqs {
		if r.input == inUnparseable {
			unparseable[r.id] = true
		}
	}
	for time.Since(outageBegan) < outage {
		if next < second {
			for end := min(next+chunk, second); next < end; next++ {
				c.publish(payloads[next], reqs[next].id)
			}
		}
		if err := l.sync(); err != nil {
			t.Fatal(err)
		}
		for _, dl := range l.deadLetters() {
			if id := dlqID(dl.data); !unparseable[id] {
				t.Fatalf("%s dead-lettered %s into the clamd outage (%s):\n%s", id,
					time.Since(outageBegan).Round(time.Second), dl.header.Get(natsjs.HeaderReason), l.state())
			}
		}
		time.Sleep(min(outage/20, 5*time.Second))
	}
	for ; next < second; next++ {
		c.publish(payloads[next], reqs[next].id)
	}
	clamd.Start()
	t.Logf("clamd back after %s; %d responses in the stream", time.Since(outageBegan).Round(time.Second), l.total())

	// Phase 3: the rest with everything up.
	for ; next < total; next++ {
		c.publish(payloads[next], reqs[next].id)
	}
	counts := accountOutcomes(t, l, reqs, time.Until(deadline), began)
	if n := counts["dead-lettered (gave up)"]; n != 0 {
		t.Errorf("%d valid requests gave up across a %s clamd outage with the default retry settings", n, outage)
	}

	// What the faults did, from the workers' logs.
	var held, lostAcks, routedAgain int
	for _, w := range workers {
		b, err := os.ReadFile(w.logPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.Contains(line, "held through a dependency outage"):
				held++
			case strings.Contains(line, "request settled already") &&
				(strings.Contains(line, `"settled":"final"`) || strings.Contains(line, `"settled":"publishing"`)):
				lostAcks++
			case strings.Contains(line, "request settled already"):
				routedAgain++
			}
		}
	}
	t.Logf("%s in all; %d jobs held through the outage, %d redeliveries of finished requests acked without running "+
		"(lost acks), %d triage redeliveries of routed ones", time.Since(began).Round(time.Second), held, lostAcks, routedAgain)
	if lostAcks == 0 {
		t.Errorf("no redelivery of a settled job was acked without running: the lost ack of %s was not exercised", clip(answered))
	}
}

// stillQueued says whether a message carrying id is still in the requests stream (a work queue: an
// acked or terminated message is gone): its outcome is out and its ack is missing.
func stillQueued(t *testing.T, l *ledger, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := l.js.Stream(ctx, streams.RequestsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return false
	}
	found := false
	next := info.State.FirstSeq
	if err := readStream(ctx, l.js, l.nc, streams.RequestsStream(), &next, func(m *jetstream.RawStreamMsg) error {
		found = found || bytes.Contains(m.Data, []byte(id))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return found
}
