package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stranded work (issue 25). A work-queue message is stranded when it is still stored but its consumer
// will never deliver it again: the consumer's delivered pointer is past it and it is not pending. The
// server then neither redelivers it nor raises a max-deliveries advisory; nothing would ever answer it.
//
// How it happens, read in nats-server v2.15.2 (server/filestore.go, server/consumer.go):
//   - A stream's messages and its removals (a work queue removes a message on its ack or term) are
//     written in place as they happen: flush in place is the default for R1 streams
//     (filestore.go:482 fs.fip = !AsyncFlush; writeMsgRecordLocked flushes at :7949, and a removal
//     writes its tombstone at once, removeMsgFromBlock :6372-6388).
//   - A consumer's state (delivered, ack floor, pending) is not: UpdateDelivered and UpdateAcks
//     (filestore.go:13848, :13917) change it in memory and kick a flusher that writes the whole state
//     at most every 100 ms (flushLoop, :13745-13799, "const minTime = 100 * time.Millisecond").
//     SyncAlways only adds O_SYNC to that write when it happens (writeFileWithOptionalSync, :14780);
//     it neither shortens the wait nor orders it against the stream's writes. So after a kill -9
//     (or an OOM kill, or a power cut with sync on) the consumer on disk can lag the stream by up to
//     100 ms of deliveries and acks. faults/stranded_test.go sees it in about a quarter of the kills
//     that land right after a delivery: the delivery is forgotten and the message comes again as a
//     first delivery (a job run twice, answered once; harmless).
//   - A consumer drops a pending entry without removing the message in exactly two places:
//     hasMaxDeliveries (consumer.go:2430-2455), which deletes the entry and moves the ack floor,
//     announcing it with the MAX_DELIVERIES advisory, and checkPending (:6148-6160), which prunes
//     entries below the stream's first sequence or the ack floor. The advisory is fire and forget:
//     sendAdvisory (:2006-2023) skips it when nobody listens at that instant ("If there is no one
//     listening for this advisory then save ourselves the effort") and nothing ever sends it again.
//     After a restart the recovered pending entries are checked 0.5–1.5 s after the consumer is
//     recovered (applyState, :3441-3466); an entry whose ack wait ran out while the server was down
//     is given up there, and the advisory goes out to whatever is subscribed by then: streams are
//     recovered in parallel (jetstream.go:1700, parallelTaskQueue) and our capture stream,
//     APP_MEDIA_ADVISORIES, is an ordinary stream that can be missing, being recovered, full or
//     leaderless. An advisory that is not captured strands its message for ever: the state
//     (delivered = the message, 0 ack pending, 0 redelivered as MaxDeliver 1 reports it, 0 advisories).
//
// Neither can be configured away: the consumer flusher's 100 ms is a constant, and sync settings
// change what survives a power cut, not the order of the two stores' writes (jetstream/sync_bench_test.go
// prices SyncAlways, which stays on for the power cut). So the worker heals: at start-up and every
// WorkerConfig.RescueEvery it looks, for triage and every lane, for stored messages of the consumer's
// subject that the consumer will not deliver again, and settles each once.
//
// What counts as stranded, conservatively, from the consumer's info alone (NATS lists no pending
// sequences): a stored message at or below the ack floor (everything there was acked, termed or given
// up: on a work queue acked and termed messages are removed, so what is left there was given up and
// nobody took it), or, when nothing is pending at all, at or below the delivered pointer. A stranded
// message above the ack floor while others are pending is found once those settle and the floor
// passes it. It must be found stranded twice, rescueConfirmAfter apart, so that an ack whose removal
// is on its way (a cluster applies the two separately) is never mistaken for one; and a message an
// advisory in APP_MEDIA_ADVISORIES names is left to the advisory path.
//
// What is done with it, through the same settlement as everything else (settle, with no message to
// ack: its "ack" removes it from the stream): a request already answered or routed (the settled-
// requests memory) is only removed, an interrupted settlement is finished (finish), and a request
// whose job moved on (a later copy of it is stored: triage routed it, or a lane re-routed it) is
// only removed. Otherwise, while MaxDeliver allows more than one delivery and it was not rescued
// before, it is handed back: a copy is stored (Nats-Msg-Id rescue/<stream>/<seq>, header Mw-Rescued)
// and the stranded one removed, which is a retry; how many deliveries it had is not known, so a
// second stranding of the same request, or MaxDeliver 1, gives it up (GaveUpAfter: the response and
// the DLQ copy). A claim in the settled-requests bucket (rescue.<seq>) makes one instance do it; a
// claim whose holder died is taken over after rescueClaimTTL, and one that got as far as storing the
// copy is only finished (the copy is not stored twice, whatever the duplicate window).

// Bounds of the rescue.
const (
	rescueConfirmAfter = 10 * time.Second // a message found stranded is rescued when still so this much later
	rescueScanLimit    = 1000             // messages read per subject per search, so a big backlog costs a bounded scan
	rescueClaimTTL     = 5 * time.Minute  // a claim older than this is its dead holder's: taken over
	defaultRescueEvery = time.Minute
)

// HeaderRescued marks a copy stored by a rescue; a copy stranded again is given up, not retried.
const HeaderRescued = "Mw-Rescued"

// Rescue claim states, the values of rescue.<seq> in the settled-requests bucket.
const (
	claimHeld     = "held"     // an instance is rescuing it
	claimRequeued = "requeued" // the copy is stored; only the removal of the stranded one is left
)

// stranded is one message of the requests stream that its consumer will not deliver again.
type stranded struct {
	lane job.Kind // "" for a request (triage)
	seq  uint64
}

// runRescue looks for stranded messages at start-up and every RescueEvery until ctx ends; a message
// found is rescued when a second look, rescueConfirmAfter later, still finds it.
func (w *Worker) runRescue(ctx context.Context) {
	every := w.wcfg.RescueEvery
	if every <= 0 {
		every = defaultRescueEvery
	}
	suspects := map[uint64]time.Time{}
	for wait := time.Duration(0); ; {
		sleepCtx(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		suspects = w.rescueRound(ctx, suspects)
		wait = every
		if len(suspects) > 0 {
			wait = min(wait, rescueConfirmAfter)
		}
	}
}

// rescueRound looks once and rescues what was found stranded on an earlier look too. It returns the
// suspects still to be confirmed (or retried), with when each was first seen.
func (w *Worker) rescueRound(ctx context.Context, suspects map[uint64]time.Time) map[uint64]time.Time {
	found, err := w.findStranded(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("looking for stranded work failed; looking again later")
		}
		return suspects
	}
	now := time.Now()
	next := map[uint64]time.Time{}
	var advised map[uint64]bool
	for _, s := range found {
		first, seen := suspects[s.seq]
		if !seen {
			first = now
		}
		if now.Sub(first) < rescueConfirmAfter {
			next[s.seq] = first
			continue
		}
		if advised == nil {
			advised = w.advisedSeqs(ctx)
		}
		if advised[s.seq] {
			continue // the advisory path gives it up
		}
		if err := w.rescue(ctx, s); err != nil {
			if ctx.Err() != nil {
				return next
			}
			w.log.Warn().Err(err).Str("lane", laneName(s.lane)).Uint64("stream_seq", s.seq).Msg("rescuing a stranded message failed; trying again later")
			next[s.seq] = first
		}
	}
	return next
}

// findStranded lists the stored messages that triage's or a lane's consumer will not deliver again.
func (w *Worker) findStranded(ctx context.Context) ([]stranded, error) {
	stream, err := w.js.Stream(ctx, w.cfg.RequestsStream())
	if err != nil {
		return nil, fmt.Errorf("opening the requests stream: %w", err)
	}
	var out []stranded
	for _, lane := range append([]job.Kind{job.Triage}, Lanes...) {
		durable, subjects := w.cfg.Durable, []string{w.cfg.Subjects().Request}
		if lane != job.Triage {
			durable, subjects = w.cfg.LaneDurable(lane), w.cfg.laneSubjects(lane)
		}
		cons, err := stream.Consumer(ctx, durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // not provisioned: nothing delivered, nothing stranded
		}
		if err != nil {
			return nil, fmt.Errorf("looking up consumer %s: %w", durable, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading consumer %s: %w", durable, err)
		}
		limit := info.AckFloor.Stream
		if info.NumAckPending == 0 {
			limit = info.Delivered.Stream
		}
		for _, subject := range subjects {
			err = scanSubject(ctx, stream, subject, 1, func(m *jetstream.RawStreamMsg) bool {
				if m.Sequence > limit {
					return false
				}
				out = append(out, stranded{lane: lane, seq: m.Sequence})
				return true
			})
			if err != nil && !errors.Is(err, errScanLimit) { // the first so many now, the rest once they are gone
				return nil, err
			}
		}
	}
	return out, nil
}

// errScanLimit says a scan read rescueScanLimit messages without reaching its end.
var errScanLimit = errors.New("too many messages to read in one go")

// scanSubject calls fn for the stored messages on subject from sequence from on, in order, until fn
// returns false, the subject has no more, or rescueScanLimit were read (errScanLimit).
func scanSubject(ctx context.Context, stream jetstream.Stream, subject string, from uint64, fn func(*jetstream.RawStreamMsg) bool) error {
	for range rescueScanLimit {
		m, err := stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s from %d: %w", subject, from, err)
		}
		if !fn(m) {
			return nil
		}
		from = m.Sequence + 1
	}
	return fmt.Errorf("reading %s: %w", subject, errScanLimit)
}

// advisedSeqs are the requests-stream sequences that max-deliveries advisories waiting in
// APP_MEDIA_ADVISORIES name: the advisory path owns them. A failure to read says nothing is owned;
// the paths end in the same single outcome anyway (settled-requests memory, Nats-Msg-Id).
func (w *Worker) advisedSeqs(ctx context.Context) map[uint64]bool {
	owned := map[uint64]bool{}
	stream, err := w.js.Stream(ctx, w.cfg.AdvisoryStream())
	if err != nil {
		return owned
	}
	_ = scanSubject(ctx, stream, ">", 1, func(m *jetstream.RawStreamMsg) bool {
		var adv maxDeliveriesAdvisory
		if json.Unmarshal(m.Data, &adv) == nil && adv.Stream == w.cfg.RequestsStream() {
			owned[adv.StreamSeq] = true
		}
		return true
	})
	return owned
}

// rescue settles one stranded message, once across instances. A rescue that fails gives its claim back,
// so the next round (here or elsewhere) starts over: the settled-requests memory and the claim's
// "requeued" say how far it got.
func (w *Worker) rescue(ctx context.Context, s stranded) (err error) {
	claim, err := w.claimRescue(ctx, s.seq)
	if err != nil || claim == "" {
		return err
	}
	defer func() {
		if err != nil && claim == claimHeld {
			w.releaseRescue(s.seq)
		}
	}()
	gctx, cancel := context.WithTimeout(ctx, w.wcfg.PublishTimeout)
	orig, err := LeaderGetMsg(gctx, w.js.Conn(), w.cfg.RequestsStream(), s.seq)
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // settled after all, or rescued by another instance
	}
	if err != nil {
		return fmt.Errorf("fetching message %d: %w", s.seq, err)
	}
	d := storedDelivery(s.lane, orig.Data, orig.Header, s.seq, orig.Time, 1, nil)
	if req, perr := contracts.ParseRequest(orig.Data); perr == nil || contracts.Correlatable(perr) {
		d.req = req
	}
	log := w.log.With().Str("lane", laneName(s.lane)).Uint64("stream_seq", s.seq).Uint64("seq", d.reqSeq).Str("mediaId", d.req.MediaID).Logger()
	done := func(action, what string) error {
		log.Warn().Str("action", action).Msg("a stranded message (its consumer would not deliver it again): " + what)
		if w.obs != nil {
			w.obs.Rescued(s.lane, action)
		}
		return nil
	}
	if claim == claimRequeued {
		if err := w.apply(ctx, d, plan{then: actRemove}, log); err != nil {
			return err
		}
		return done("retried", "finished handing it back (its copy was stored earlier)")
	}

	// How far did the request go? As on the advisory path: never a second, opposite answer.
	state, ob, err := w.done.recall(ctx, d.reqSeq)
	if err != nil {
		return fmt.Errorf("reading the settled-requests memory for %d: %w", d.reqSeq, err)
	}
	switch {
	case state == settledPublishing:
		if err := w.finish(ctx, d, ob, log); err != nil {
			return err
		}
		return done("finished", "finished its interrupted settlement")
	case state == settledFinal || d.lane == job.Triage && state == settledRouted:
		if err := w.apply(ctx, d, plan{then: actRemove}, log); err != nil {
			return err
		}
		return done("removed", "removed it: its request was settled already")
	}
	moved, err := w.movedOn(ctx, d)
	if err != nil {
		return err
	}
	if moved {
		if err := w.apply(ctx, d, plan{then: actRemove}, log); err != nil {
			return err
		}
		return done("removed", "removed it: a later copy of its request is on its way")
	}

	// A lane message is handed back as a copy in its lane. A request on the request subject is not:
	// the worker may not publish requests (deploy/nats/accounts.conf), and what a request's headers
	// say is the API's; it is given up, answered and dead-lettered, for an operator's replay.
	if d.lane != job.Triage && w.cfg.MaxDeliver > 1 && orig.Header.Get(HeaderRescued) == "" {
		if err := w.requeue(ctx, d, orig); err != nil {
			return err
		}
		return done("retried", "handed it back as a new message")
	}
	d.deliveries = uint64(w.cfg.MaxDeliver)
	cause := errors.New("the request was stranded in the work queue: its consumer's state lost it in a crash and would never deliver it again")
	if err := w.settle(ctx, d, w.gaveUpAfter(d.req, d.lane, d.deliveries, cause), log); err != nil {
		return err
	}
	return done("gave_up", "gave it up (response and dead letter)")
}

// movedOn reports whether a later copy of d's request is stored in a lane: triage routed it (its
// lane copy, or its copy past a full lane's cap, is on its way), a lane re-routed it to the other lane,
// or an earlier rescue stored its copy. Then d is done with and answering it would answer the request
// twice. Only lane subjects are read, whose messages only the worker writes: what a request on the
// request subject carries says nothing (the API chooses it). A backlog too long to read in one go is
// taken as no copy, as before this check existed (the settled-requests memory still guards).
func (w *Worker) movedOn(ctx context.Context, d *delivery) (bool, error) {
	stream, err := w.js.Stream(ctx, w.cfg.RequestsStream())
	if err != nil {
		return false, fmt.Errorf("opening the requests stream: %w", err)
	}
	want := strconv.FormatUint(d.reqSeq, 10)
	for _, l := range Lanes {
		// Its copy past a full lane's cap: an exact subject.
		_, err := stream.GetMsg(ctx, d.seq+1, jetstream.WithGetMsgSubject(w.cfg.overflowSubject(l, d.reqSeq)))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("looking for a later copy of request %d: %w", d.reqSeq, err)
		}
		for _, subject := range w.cfg.laneSubjects(l) {
			found := false
			err := scanSubject(ctx, stream, subject, d.seq+1, func(m *jetstream.RawStreamMsg) bool {
				found = m.Header.Get(HeaderRequestSeq) == want
				return !found
			})
			if errors.Is(err, errScanLimit) {
				w.log.Warn().Uint64("seq", d.reqSeq).Str("subject", subject).Msg("too long a backlog to look for a later copy of the request; taking it as none")
				continue
			}
			if err != nil {
				return false, fmt.Errorf("looking for a later copy of request %d: %w", d.reqSeq, err)
			}
			if found {
				return true, nil
			}
		}
	}
	return false, nil
}

// requeueID is the Nats-Msg-Id of a stranded lane message's copy: like routeID, it ends in a digest of
// when the server stored the stranded message, so no publisher can claim it in advance as a request's
// id in the duplicate window the requests stream shares.
func (w *Worker) requeueID(seq uint64, stored time.Time) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("rescue/%s/%d/%d", w.cfg.RequestsStream(), seq, stored.UnixNano())))
	return fmt.Sprintf("rescue/%s/%d/%x", w.cfg.RequestsStream(), seq, sum[:8])
}

// requeue stores a copy of a stranded message on its own subject, for a fresh round of deliveries, and
// removes the stranded one. A request's copy is a new request (triage does not take identities from a
// request's headers); a lane's copy keeps its request's (Mw-Request-Seq).
func (w *Worker) requeue(ctx context.Context, d *delivery, orig *jetstream.RawStreamMsg) error {
	// On a subject of its own under the lane's (one message: the lane's --max-queued cap, which may be
	// what keeps the lane full, cannot refuse it), which the lane's consumer reads. Stream sequences
	// are unique, so it never meets another request's copy past the cap (those end in a request's).
	m := nats.NewMsg(w.cfg.overflowSubject(d.lane, d.seq))
	m.Data = orig.Data
	copyHeaders(m.Header, orig.Header)
	m.Header.Set(HeaderRescued, strconv.FormatUint(d.seq, 10))
	p := plan{events: []event{{msg: m, id: w.requeueID(d.seq, orig.Time)}}, requeued: true, then: actRemove}
	if err := w.apply(ctx, d, p, w.log); err != nil {
		return fmt.Errorf("handing back stranded message %d: %w", d.seq, err)
	}
	return nil
}

// releaseRescue gives a claim back after a failed attempt (unless it got as far as the copy: then the
// claim says so). Should this fail too, the claim is taken over after rescueClaimTTL.
func (w *Worker) releaseRescue(seq uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), w.wcfg.PublishTimeout)
	defer cancel()
	kv, err := w.done.bucket(ctx)
	if err != nil {
		return
	}
	if e, err := kv.Get(ctx, rescueKey(seq)); err == nil && strings.HasPrefix(string(e.Value()), claimHeld) {
		_ = kv.Delete(ctx, rescueKey(seq), jetstream.LastRevision(e.Revision()))
	}
}

func rescueKey(seq uint64) string { return "rescue." + strconv.FormatUint(seq, 10) }

// claimRescue makes this instance the one that rescues seq. It returns the claim's state ("" when
// another instance holds it): claimHeld, or claimRequeued when an earlier holder stored the copy and
// only its removal is left.
func (w *Worker) claimRescue(ctx context.Context, seq uint64) (string, error) {
	kv, err := w.done.bucket(ctx)
	if err != nil {
		return "", err
	}
	key, value := rescueKey(seq), []byte(claimHeld+" "+time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := kv.Create(ctx, key, value); err == nil {
		return claimHeld, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", fmt.Errorf("claiming the rescue of %d: %w", seq, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("reading the rescue claim of %d: %w", seq, err)
	}
	if strings.HasPrefix(string(e.Value()), claimRequeued) {
		return claimRequeued, nil // removing twice is harmless: whoever comes first
	}
	if time.Since(e.Created()) < rescueClaimTTL {
		return "", nil
	}
	if _, err := kv.Update(ctx, key, value, e.Revision()); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return "", nil // another instance took it over first
		}
		return "", fmt.Errorf("taking over the rescue claim of %d: %w", seq, err)
	}
	return claimHeld, nil
}

// markRequeued records that seq's copy is stored, so no later holder of the claim stores another.
func (w *Worker) markRequeued(ctx context.Context, seq uint64) error {
	kv, err := w.done.bucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, rescueKey(seq), []byte(claimRequeued)); err != nil {
		return fmt.Errorf("recording the hand-back of %d: %w", seq, err)
	}
	return nil
}
