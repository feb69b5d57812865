package faults

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Issue 25: a request whose worker dies mid-job together with the NATS server inside it (the embedded
// default) must still be answered exactly once after a restart on the same data dir: never stranded in
// the work queue with a consumer that believes it was settled.
//
// CI runs a few iterations; `make faults-stranded` runs the long loop (MW_FAULTS_STRANDED_RUNS, 100 by
// default there) beside CPU and I/O load (MW_FAULTS_STRANDED_LOAD=1).

// strandedRuns is how many times a loop test repeats its scenario.
func strandedRuns(t *testing.T, ci int) int {
	t.Helper()
	if s := os.Getenv("MW_FAULTS_STRANDED_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MW_FAULTS_STRANDED_RUNS=%q: want a positive count", s)
		}
		return n
	}
	if testing.Short() {
		return 2
	}
	return ci
}

// SIGKILL of a worker running the embedded server, mid-transcode on the request's only delivery
// (--max-deliver 1), then a new worker on the same --data-dir and port: each time the request is given
// up exactly once (one failure response, one dead letter) and the work queue ends empty.
func TestKilledWithItsEmbeddedServerIsAnsweredOnce(t *testing.T) {
	runs := strandedRuns(t, 6)
	if os.Getenv("MW_FAULTS_STRANDED_LOAD") == "1" {
		startLoad(t)
	}
	clamd := testenv.StartClamd(t)
	ff := newFFmpegWrapper(t)
	ff.hold()
	dataDir := filepath.Join(t.TempDir(), "data")
	storeDir := filepath.Join(dataDir, "jetstream") // the embedded server's store (jetstream.EmbeddedConfig)
	port := testenv.FreePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	w := startWorker(t, "embedded", workerOpts{clamd: clamd, ffmpeg: ff, args: []string{
		"--data-dir", dataDir, "--nats-listen", "127.0.0.1:" + strconv.Itoa(port),
		"--max-deliver", "1", "--ack-wait", "2s"}})
	l := newLedger(t, url)
	c := newClient(t, l, nil, 1)
	video := videoFile(t)

	began := time.Now()
	var gaveUp, succeeded int
	for i := range runs {
		ff.hold()
		before := len(ff.encodes())
		id, seq := c.submitSeq(video, fmt.Sprintf("u/stranded-%d.mov", i))
		enc := awaitNewEncode(t, ff, w.pid(), before)
		if i%2 == 1 {
			// The case: killed long enough after the delivery that the video consumer's state
			// on disk records it as pending (the server writes consumer state at most every 100 ms).
			awaitPendingOnDisk(t, storeDir, seq)
		}
		w.kill()
		ff.kill(enc)
		// Should the new server hand the job out again (its delivery was never recorded), it runs to
		// its end: that is one answer too.
		ff.release()
		onDisk := consumerStatesOnDisk(storeDir)
		restarted := time.Now()
		w.start()
		l.connected(30 * time.Second)
		func() {
			defer func() {
				if t.Failed() {
					t.Logf("run %d of %d, request %s (seq %d):\n%s\nconsumer state the killed server left on disk:\n%s",
						i+1, runs, id, seq, strandedReport(l, seq), onDisk)
				}
			}()
			// Within a minute of the start: the worker looks for stranded work at start-up.
			l.await([]string{id}, 60*time.Second)
			r := l.one(id)
			switch {
			case r.Success:
				succeeded++
			case strings.Contains(r.Error, "gave up"):
				gaveUp++
				l.awaitDLQ(gaveUp, 10*time.Second)
			default:
				t.Fatalf("run %d: response %+v, want a success or a failure saying it gave up", i+1, r)
			}
			l.awaitEmptyQueue(30 * time.Second)
			if got, want := l.deadLettersOf(id), map[bool]int{true: 0, false: 1}[r.Success]; got != want {
				t.Fatalf("run %d: %d dead letters of %s, want %d", i+1, got, id, want)
			}
			t.Logf("run %d of %d: answered %s after the restart (success %v); on disk after the kill:\n%s",
				i+1, runs, time.Since(restarted).Round(10*time.Millisecond), r.Success, onDisk)
		}()
	}
	if n := l.total(); n != runs {
		t.Errorf("%d responses in the stream after %d runs, want %d", n, runs, runs)
	}
	t.Logf("%d runs in %s: %d given up, %d run again to success", runs, time.Since(began).Round(time.Second), gaveUp, succeeded)
}

// awaitPendingOnDisk waits until the video lane's state file holds a pending delivery after the request
// seq (its lane copy).
func awaitPendingOnDisk(t *testing.T, storeDir string, seq uint64) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		st, err := readConsumerState(storeDir, streams.Lane("video").Durable())
		if err != nil {
			return err
		}
		for _, p := range st.pending {
			if p > seq {
				return nil
			}
		}
		return fmt.Errorf("video lane state on disk: %s", st)
	})
}

// awaitNewEncode waits until a worker process with pid has started an encode after the first n and
// returns it.
func awaitNewEncode(t *testing.T, f *ffmpegWrapper, workerPID, n int) encodeRun {
	t.Helper()
	var run encodeRun
	testenv.Eventually(t, 60*time.Second, func() error {
		encodes := f.encodes()
		for _, e := range encodes[min(n, len(encodes)):] {
			if e.workerPID == workerPID {
				run = e
				return nil
			}
		}
		return fmt.Errorf("worker %d has not started a new encode (encodes so far: %v)", workerPID, encodes)
	})
	return run
}

// A lane copy planted in the stranded state on the embedded server's store (its consumer reset past
// it: stored, delivered, not pending, as a consumer whose pending entry was lost in a crash) is
// answered within a minute of the worker's start, exactly once: with a delivery left (--max-deliver 2)
// the worker hands it back and the job runs again.
func TestPlantedStrandedCopyIsAnsweredWithinAMinuteOfStart(t *testing.T) {
	clamd := testenv.StartClamd(t)
	ff := newFFmpegWrapper(t)
	ff.hold()
	dataDir := filepath.Join(t.TempDir(), "data")
	storeDir := filepath.Join(dataDir, "jetstream")
	listen := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	w := startWorker(t, "planted", workerOpts{clamd: clamd, ffmpeg: ff, args: []string{
		"--data-dir", dataDir, "--nats-listen", listen, "--max-deliver", "2", "--ack-wait", "2s"}})
	l := newLedger(t, "nats://"+listen)
	c := newClient(t, l, nil, 1)
	id, seq := c.submitSeq(videoFile(t), "u/planted.mov")
	enc := awaitNewEncode(t, ff, w.pid(), 0)
	awaitPendingOnDisk(t, storeDir, seq)
	w.kill()
	ff.kill(enc)
	ff.release()
	plantStranded(t, natsjs.EmbeddedConfig{Listen: listen, DataDir: dataDir}, streams.Lane("video").Durable())

	began := time.Now()
	w.start()
	l.connected(30 * time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("request %s (seq %d):\n%s", id, seq, strandedReport(l, seq))
		}
	}()
	l.await([]string{id}, time.Minute)
	if r := l.one(id); !r.Success {
		t.Fatalf("response %+v, want the job's success on its handed-back copy", r)
	}
	t.Logf("answered %s after the start", time.Since(began).Round(100*time.Millisecond))
	l.awaitEmptyQueue(30 * time.Second)
	if n := l.deadLettersOf(id); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if b, _ := os.ReadFile(w.logPath); !strings.Contains(string(b), `"action":"retried"`) {
		t.Errorf("the worker did not log handing the stranded copy back")
	}
}

// plantStranded opens the dead worker's store with a server of its own and resets durable past what
// it delivered: the delivered message stays stored and is no longer pending.
func plantStranded(t *testing.T, cfg natsjs.EmbeddedConfig, durable string) {
	t.Helper()
	s, err := natsjs.StartEmbedded(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, streams.RequestsStream(), durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	delivered := info.Delivered.Stream
	req, _ := json.Marshal(map[string]uint64{"seq": delivered + 1})
	reply, err := nc.RequestWithContext(ctx, fmt.Sprintf("$JS.API.CONSUMER.RESET.%s.%s", streams.RequestsStream(), durable), req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(reply.Data), `"error"`) {
		t.Fatalf("resetting %s: %s", durable, reply.Data)
	}
	if info, err = cons.Info(ctx); err != nil || info.NumAckPending != 0 || info.Delivered.Stream != delivered {
		t.Fatalf("after the reset %s: %+v %v, want %d delivered and nothing pending", durable, info, err, delivered)
	}
	st, err := js.Stream(ctx, streams.RequestsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetMsg(ctx, delivered); err != nil {
		t.Fatalf("the delivered message %d is not stored: %v", delivered, err)
	}
}

// The same on an external nats-server killed with SIGKILL mid-transcode and started again on the same
// store, the worker alive throughout: the job, held until the server is back, finishes and its request
// is answered exactly once, and the work queue ends empty (an ack the restarted server no longer
// expected must not leave the message stranded).
func TestExternalServerKilledMidJobIsAnsweredOnce(t *testing.T) {
	runs := strandedRuns(t, 4)
	if os.Getenv("MW_FAULTS_STRANDED_LOAD") == "1" {
		startLoad(t)
	}
	clamd := testenv.StartClamd(t)
	np := testenv.StartNATSProc(t)
	ff := newFFmpegWrapper(t)
	w := startWorker(t, "external", workerOpts{natsURL: np.URL, clamd: clamd, ffmpeg: ff})
	l := newLedger(t, np.URL)
	c := newClient(t, l, nil, 1)
	video := videoFile(t)

	began := time.Now()
	for i := range runs {
		ff.hold()
		before := len(ff.encodes())
		id, seq := c.submitSeq(video, fmt.Sprintf("u/external-%d.mov", i))
		awaitNewEncode(t, ff, w.pid(), before)
		if i%2 == 1 {
			awaitPendingOnDisk(t, np.StoreDir, seq)
		}
		np.Kill()
		onDisk := consumerStatesOnDisk(np.StoreDir)
		restarted := time.Now()
		np.Start()
		ff.release()
		l.connected(30 * time.Second)
		func() {
			defer func() {
				if t.Failed() {
					t.Logf("run %d of %d, request %s (seq %d):\n%s\nconsumer state the killed server left on disk:\n%s",
						i+1, runs, id, seq, strandedReport(l, seq), onDisk)
				}
			}()
			l.await([]string{id}, 60*time.Second)
			if r := l.one(id); !r.Success {
				t.Fatalf("run %d: response %+v, want the held job's success", i+1, r)
			}
			l.awaitEmptyQueue(60 * time.Second)
			if n := l.deadLettersOf(id); n != 0 {
				t.Fatalf("run %d: %d dead letters of %s, want none", i+1, n, id)
			}
		}()
		t.Logf("run %d of %d: answered and the queue empty %s after the restart", i+1, runs, time.Since(restarted).Round(10*time.Millisecond))
	}
	if n := l.total(); n != runs {
		t.Errorf("%d responses in the stream after %d runs, want %d", n, runs, runs)
	}
	t.Logf("%d runs in %s", runs, time.Since(began).Round(time.Second))
}

// submitSeq uploads path under key, publishes a request for it as a careful API does and returns the
// mediaId and the request's stream sequence (its key in the settled-requests memory).
func (c *client) submitSeq(path, key string) (string, uint64) {
	c.t.Helper()
	c.upload(path, key)
	req := testenv.NewRequest(bucket, key)
	data, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: streams.Subjects().Request, Data: data},
		jetstream.WithMsgID(req.MediaID), jetstream.WithExpectStream(streams.RequestsStream()))
	if err != nil {
		c.t.Fatalf("publishing request: %v", err)
	}
	return req.MediaID, ack.Sequence
}

// connected waits until the ledger's connection is back after a restart of the server.
func (l *ledger) connected(timeout time.Duration) {
	l.t.Helper()
	testenv.Eventually(l.t, timeout, func() error {
		if !l.nc.IsConnected() {
			return errors.New("not reconnected yet")
		}
		return l.nc.Flush()
	})
}

// deadLettersOf counts the dead letters of mediaId.
func (l *ledger) deadLettersOf(id string) int {
	n := 0
	for _, d := range l.deadLetters() {
		var r struct{ MediaID string }
		if json.Unmarshal(d.data, &r) == nil && r.MediaID == id {
			n++
		}
	}
	return n
}

// strandedReport is what a stranded request leaves behind: the streams and consumers, the messages of
// the advisory stream and the settled-requests memory's entry of the request.
func strandedReport(l *ledger, reqSeq uint64) string {
	var b strings.Builder
	b.WriteString(l.state())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := l.js.Stream(ctx, streams.AdvisoryCapture().Stream()); err == nil {
		if info, err := s.Info(ctx); err == nil {
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq < info.State.FirstSeq+20; seq++ {
				if m, err := s.GetMsg(ctx, seq); err == nil {
					fmt.Fprintf(&b, "  advisory #%d %s\n", seq, m.Data)
				}
			}
		}
		if c, err := l.js.Consumer(ctx, streams.AdvisoryCapture().Stream(), streams.Durable+"-advisories"); err == nil {
			if info, err := c.Info(ctx); err == nil {
				fmt.Fprintf(&b, "  advisory consumer: delivered %d, ack floor %d, ack pending %d, redelivered %d\n",
					info.Delivered.Stream, info.AckFloor.Stream, info.NumAckPending, info.NumRedelivered)
			}
		}
	}
	kv, err := l.js.KeyValue(ctx, streams.Buckets().Settled())
	if err != nil {
		fmt.Fprintf(&b, "  settled-requests memory: %v\n", err)
		return b.String()
	}
	e, err := kv.Get(ctx, strconv.FormatUint(reqSeq, 10))
	if err != nil {
		fmt.Fprintf(&b, "  settled-requests memory [%d]: %v\n", reqSeq, err)
	} else {
		fmt.Fprintf(&b, "  settled-requests memory [%d] rev %d at %s: %s\n", reqSeq, e.Revision(), e.Created().Format(time.RFC3339Nano), e.Value())
	}
	return b.String()
}

// consumerStatesOnDisk describes the requests stream's consumers' state files as a killed server left
// them in its store dir (nats-server's -sd).
func consumerStatesOnDisk(storeDir string) string {
	var b strings.Builder
	for _, durable := range []string{streams.Durable, streams.Lane("image").Durable(), streams.Lane("video").Durable()} {
		st, err := readConsumerState(storeDir, durable)
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", durable, err)
			continue
		}
		fmt.Fprintf(&b, "  %s: %s\n", durable, st)
	}
	return b.String()
}

// diskConsumerState is nats-server's consumer state file (version 2): ack floor, delivered, pending.
type diskConsumerState struct {
	ackFloor, ackFloorStream, delivered, deliveredStream uint64
	pending                                              []uint64 // stream sequences
}

func (s diskConsumerState) String() string {
	return fmt.Sprintf("ack floor %d (stream %d), delivered %d (stream %d), pending %v",
		s.ackFloor, s.ackFloorStream, s.delivered, s.deliveredStream, s.pending)
}

// readConsumerState reads a consumer's state file; nats-server keeps it in
// <store dir>/jetstream/<account>/streams/<stream>/obs/<consumer>/o.dat.
func readConsumerState(storeDir, durable string) (diskConsumerState, error) {
	var st diskConsumerState
	files, _ := filepath.Glob(filepath.Join(storeDir, "jetstream", "*", "streams", streams.RequestsStream(), "obs", durable, "o.dat"))
	if len(files) != 1 {
		return st, fmt.Errorf("%d state files", len(files))
	}
	buf, err := os.ReadFile(files[0])
	if err != nil {
		return st, err
	}
	if len(buf) < 2 || buf[1] != 2 {
		return st, fmt.Errorf("unknown format % x", buf)
	}
	i := 2
	next := func() uint64 {
		v, n := binary.Uvarint(buf[min(i, len(buf)):])
		if n <= 0 {
			return 0
		}
		i += n
		return v
	}
	varint := func() {
		if _, n := binary.Varint(buf[min(i, len(buf)):]); n > 0 {
			i += n
		}
	}
	st.ackFloor, st.ackFloorStream, st.delivered, st.deliveredStream = next(), next(), next(), next()
	np := next()
	if np > 0 && np < 1000 {
		varint() // the base timestamp
		for range np {
			st.pending = append(st.pending, next()+st.ackFloorStream)
			next()   // delivery sequence
			varint() // timestamp
		}
	}
	return st, nil
}

// startLoad keeps both cores busy and the disk writing and fsyncing until the test ends, as a busy
// machine would: the crash must be survived then too.
func startLoad(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range 2 {
		wg.Go(func() {
			sum := sha256.Sum256(nil)
			for ctx.Err() == nil {
				for range 10000 {
					sum = sha256.Sum256(sum[:])
				}
			}
		})
	}
	dir := t.TempDir()
	wg.Go(func() {
		block := make([]byte, 1<<20)
		for i := 0; ctx.Err() == nil; i++ {
			p := filepath.Join(dir, fmt.Sprintf("load-%d", i%2))
			f, err := os.Create(p)
			if err != nil {
				return
			}
			for j := 0; j < 32 && ctx.Err() == nil; j++ {
				_, _ = f.Write(block)
			}
			_ = f.Sync()
			f.Close()
			os.Remove(p)
		}
	})
}
