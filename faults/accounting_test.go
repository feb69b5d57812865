package faults

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

// input is what one request carries, and so which outcomes are acceptable for it.
type input string

const (
	inImage       input = "image"
	inVideo       input = "video"
	inEICAR       input = "eicar"
	inJunk        input = "junk"        // random bytes: unsupported media
	inInvalid     input = "invalid"     // a bad key, but a mediaId to answer
	inUnparseable input = "unparseable" // no mediaId: only the DLQ can take it
)

// mix is the share of each input in the accounting run, in tenths.
var mix = []input{inImage, inImage, inImage, inImage, inImage, inVideo, inEICAR, inJunk, inInvalid, inUnparseable}

type tracked struct {
	id    string // mediaId, or the marker inside an unparseable payload
	input input
}

// 500 mixed requests while clamd, the S3 server (versitygw) and the workers are stopped, killed and restarted at random:
// every request ends in exactly one terminal outcome, and that outcome fits what it carried.
func TestAccountingEveryRequestEndsOnce(t *testing.T) {
	total, budget := 500, 6*time.Minute
	if testing.Short() {
		total, budget = 60, 2*time.Minute
	}
	seed := uint64(time.Now().UnixNano())
	rng := mrand.New(mrand.NewPCG(seed, 0))
	t.Logf("%d requests, seed %d", total, seed)

	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	m := testenv.StartS3(t)
	opts := func() workerOpts {
		return workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m,
			args: []string{"--backoff-base", "500ms", "--backoff-max", "4s"}}
	}
	workers := []*workerProc{startWorker(t, "a", opts()), startWorker(t, "b", opts())}
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, m, 1)

	// Upload everything first (the API's side is not under test), then publish while faults happen.
	reqs, payloads := prepareRequests(t, c, rng, total)

	// Publish in chunks; between chunks, one fault at a time, healed before the next.
	began := time.Now()
	faults := map[string]int{}
	chunk := max(total/10, 1)
	for next := 0; next < total; {
		for end := min(next+chunk, total); next < end; next++ {
			c.publish(payloads[next], reqs[next].id)
		}
		outage := time.Duration(1000+rng.IntN(3000)) * time.Millisecond
		switch f := rng.IntN(5); f {
		case 0:
			faults["clamd down"]++
			clamd.Stop()
			time.Sleep(outage)
			clamd.Start()
		case 1:
			faults["S3 down"]++
			m.Stop()
			time.Sleep(outage)
			m.Start()
		case 2:
			faults["worker SIGKILL"]++
			w := workers[rng.IntN(len(workers))]
			w.kill()
			time.Sleep(outage)
			w.start()
		case 3:
			faults["worker SIGTERM (drain)"]++
			w := workers[rng.IntN(len(workers))]
			if code := w.term(30 * time.Second); code != 0 {
				t.Errorf("worker %s exited with status %d after SIGTERM, want 0", w.name, code)
			}
			time.Sleep(outage / 2)
			w.start()
		default:
			faults["quiet"]++
			time.Sleep(outage)
		}
	}
	t.Logf("published %d requests in %s with faults %v", total, time.Since(began).Round(time.Second), faults)

	accountOutcomes(t, l, reqs, budget-time.Since(began), began)
	// Every crashed run's scratch dir was removed when its worker restarted, and no job leaked one.
	for _, w := range workers {
		if left := scratchDirs(t, w.opts.tmpDir); len(left) != 0 {
			t.Errorf("worker %s's tmp dir still holds %v", w.name, left)
		}
	}
}

// prepareRequests uploads what total mixed requests carry (drawn from mix) and returns them with the
// payloads to publish.
func prepareRequests(t *testing.T, c *client, rng *mrand.Rand, total int) ([]tracked, [][]byte) {
	t.Helper()
	dir := t.TempDir()
	jpeg := testenv.MakeJPEG(t, dir, 320, 240)
	// Motion JPEG, so every video is really encoded (an H.264 MOV would only be remuxed).
	video := testenv.MakeVideo(t, dir, "v.mov", testenv.VideoOpts{Width: 160, Height: 120, Seconds: 1, FPS: 10, VCodec: "mjpeg"})
	eicar := writeFile(t, dir, "eicar.bin", []byte(testenv.EICAR))
	junkBytes := make([]byte, 4096)
	_, _ = rand.Read(junkBytes)
	junk := writeFile(t, dir, "junk.bin", junkBytes)

	reqs := make([]tracked, total)
	payloads := make([][]byte, total)
	for i := range reqs {
		in := mix[rng.IntN(len(mix))]
		id := uuid.NewString()
		key := fmt.Sprintf("acct/%d/file", i)
		switch in {
		case inImage:
			c.upload(jpeg, key)
		case inVideo:
			c.upload(video, key)
		case inEICAR:
			c.upload(eicar, key)
		case inJunk:
			c.upload(junk, key)
		case inInvalid:
			key = "acct/../" + key
		}
		var data []byte
		if in == inUnparseable {
			data = []byte(`{"mediaId": 42, "marker": "` + id + `"}`)
		} else {
			data, _ = json.Marshal(contracts.Request{S3Key: key, S3Bucket: bucket, MediaID: id, MediaURL: "https://api.example/v1/media/" + id})
		}
		reqs[i], payloads[i] = tracked{id: id, input: in}, data
	}
	return reqs, payloads
}

// accountOutcomes waits up to budget for a terminal outcome of every request, checks that each has
// exactly one and that it fits its input, logs the tally since began, and returns the count of each
// outcome.
func accountOutcomes(t *testing.T, l *ledger, reqs []tracked, budget time.Duration, began time.Time) map[string]int {
	t.Helper()
	wantDLQ := 0
	var answerable []string
	for _, r := range reqs {
		if r.input == inUnparseable {
			wantDLQ++
		} else {
			answerable = append(answerable, r.id)
		}
	}
	l.await(answerable, budget)
	l.awaitDLQ(wantDLQ, time.Minute)
	l.awaitEmptyQueue(time.Minute)
	if err := l.sync(); err != nil {
		t.Fatal(err)
	}

	dlqByID := map[string][]deadLetter{}
	for _, dl := range l.deadLetters() {
		id := dlqID(dl.data)
		dlqByID[id] = append(dlqByID[id], dl)
	}
	counts, gaveUp := map[string]int{}, map[string]int{}
	for _, r := range reqs {
		outcome, err := l.outcome(r, dlqByID[r.id])
		if err != nil {
			t.Errorf("%s (%s): %v", r.id, r.input, err)
			continue
		}
		counts[outcome]++
		if outcome == "dead-lettered (gave up)" {
			gaveUp[clipErr(l.one(r.id).Error)]++
		}
	}
	wireDupes := l.republished(answerable)
	var lines []string
	for k, v := range counts {
		lines = append(lines, fmt.Sprintf("%-28s %4d", k, v))
	}
	sort.Strings(lines)
	t.Logf("every one of %d requests has exactly one terminal outcome (%s):\n  %s\n  deliveries (triage and lanes) %d, republished on the wire (deduplicated in the stream) %d",
		len(reqs), time.Since(began).Round(time.Second), strings.Join(lines, "\n  "), l.deliveries(), wireDupes)
	for cause, n := range gaveUp {
		t.Logf("  gave up %3d× %s", n, cause)
	}
	for _, info := range l.consumers() {
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Errorf("consumer %s still has %d pending and %d unacknowledged", info.Name, info.NumPending, info.NumAckPending)
		}
	}
	return counts
}

// dlqID is the mediaId (or the marker) a dead letter's payload carries.
func dlqID(data []byte) string {
	var v struct {
		MediaID any    `json:"mediaId"`
		Marker  string `json:"marker"`
	}
	_ = json.Unmarshal(data, &v)
	if v.Marker != "" {
		return v.Marker
	}
	if s, ok := v.MediaID.(string); ok {
		return s
	}
	return ""
}

// outcome names the one terminal outcome of r, or says why it has none or more than one.
func (l *ledger) outcome(r tracked, dead []deadLetter) (string, error) {
	l.mu.Lock()
	rs, viruses := l.responses[r.id], l.viruses[r.id]
	l.mu.Unlock()

	if r.input == inUnparseable {
		if len(rs) != 0 || len(dead) != 1 {
			return "", fmt.Errorf("%d responses and %d dead letters, want none and one", len(rs), len(dead))
		}
		if got := dead[0].header.Get(natsjs.HeaderReason); got != "parse-error" {
			return "", fmt.Errorf("dead letter reason %q, want parse-error", got)
		}
		return "dead-lettered (unparseable)", nil
	}
	if len(rs) != 1 {
		return "", fmt.Errorf("%d responses in the stream, want exactly 1: %+v", len(rs), rs)
	}
	resp := rs[0]
	if len(viruses) > 1 {
		return "", fmt.Errorf("%d virus events, want at most 1", len(viruses))
	}
	gaveUp := !resp.Success && strings.HasPrefix(resp.Error, "gave up after")
	if gaveUp {
		if len(dead) != 1 {
			return "", fmt.Errorf("gave up (%s) with %d dead letters, want 1", resp.Error, len(dead))
		}
		return "dead-lettered (gave up)", nil
	}
	if len(dead) != 0 {
		return "", fmt.Errorf("in the DLQ although answered with %+v", resp)
	}
	switch r.input {
	case inImage, inVideo:
		if !resp.Success {
			return "", fmt.Errorf("a valid %s failed: %s", r.input, resp.Error)
		}
		return "success (" + string(r.input) + ")", nil
	case inEICAR:
		if len(viruses) != 1 {
			return "", fmt.Errorf("EICAR answered with %+v and %d virus events; want one virus event", resp, len(viruses))
		}
		if resp.Success || !strings.HasPrefix(resp.Error, "virus detected: ") {
			return "", fmt.Errorf("EICAR answered with %+v", resp)
		}
		return "virus", nil
	case inJunk:
		if resp.Success || !strings.Contains(resp.Error, "unsupported") {
			return "", fmt.Errorf("junk answered with %+v, want an unsupported-media failure", resp)
		}
		return "failure (unsupported)", nil
	case inInvalid:
		if resp.Success || !strings.HasPrefix(resp.Error, "invalid request: ") {
			return "", fmt.Errorf("an invalid request answered with %+v", resp)
		}
		return "failure (invalid request)", nil
	}
	return "", fmt.Errorf("unknown input %q", r.input)
}

// clipErr shortens an error to its cause's kind, so gave-up reasons can be grouped.
func clipErr(s string) string {
	s = strings.TrimPrefix(s, "gave up after ")
	if i := strings.Index(s, "acct/"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}
