package jetstream

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
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

// rescuer finds stranded messages and settles each once, through the same settlement as the rest.
type rescuer struct {
	s       *settler
	backlog *backlog
	every   time.Duration // WorkerConfig.RescueEvery
	log     zerolog.Logger
}

// stranded is one message of the requests stream that its consumer will not deliver again.
type stranded struct {
	lane job.Kind // "" for a request (triage)
	seq  uint64
}

// run looks for stranded messages at start-up and every RescueEvery until ctx ends; a message
// found is rescued when a second look, rescueConfirmAfter later, still finds it.
func (r *rescuer) run(ctx context.Context) {
	every := r.every
	if every <= 0 {
		every = defaultRescueEvery
	}
	suspects := map[uint64]time.Time{}
	for wait := time.Duration(0); ; {
		sleepCtx(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		suspects = r.round(ctx, suspects)
		wait = every
		if len(suspects) > 0 {
			wait = min(wait, rescueConfirmAfter)
		}
	}
}

// round looks once and rescues what was found stranded on an earlier look too. It returns the
// suspects still to be confirmed (or retried), with when each was first seen.
func (r *rescuer) round(ctx context.Context, suspects map[uint64]time.Time) map[uint64]time.Time {
	found, err := r.backlog.findStranded(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("looking for stranded work failed; looking again later")
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
			advised = r.backlog.advisedSeqs(ctx)
		}
		if advised[s.seq] {
			continue // the advisory path gives it up
		}
		if err := r.rescue(ctx, s); err != nil {
			if ctx.Err() != nil {
				return next
			}
			r.log.Warn().Err(err).Str("lane", laneName(s.lane)).Uint64("stream_seq", s.seq).Msg("rescuing a stranded message failed; trying again later")
			next[s.seq] = first
		}
	}
	return next
}

// rescue settles one stranded message, once across instances. A rescue that fails gives its claim back,
// so the next round (here or elsewhere) starts over: the settled-requests memory and the claim's
// "requeued" say how far it got.
func (r *rescuer) rescue(ctx context.Context, s stranded) (err error) {
	claim, err := r.s.claims.claim(ctx, s.seq)
	if err != nil || claim == "" {
		return err
	}
	defer func() {
		if err != nil && claim == claimHeld {
			r.s.claims.release(s.seq, r.s.wcfg.PublishTimeout)
		}
	}()
	gctx, cancel := context.WithTimeout(ctx, r.s.wcfg.PublishTimeout)
	orig, err := LeaderGetMsg(gctx, r.s.js.Conn(), r.s.cfg.RequestsStream(), s.seq)
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
	log := r.log.With().Str("lane", laneName(s.lane)).Uint64("stream_seq", s.seq).Uint64("seq", d.reqSeq).Str("mediaId", d.req.MediaID).Logger()
	done := func(action, what string) error {
		log.Warn().Str("action", action).Msg("a stranded message (its consumer would not deliver it again): " + what)
		r.s.tally.rescued(s.lane, action)
		return nil
	}
	if claim == claimRequeued {
		if err := r.s.apply(ctx, d, plan{then: actRemove}, log); err != nil {
			return err
		}
		return done("retried", "finished handing it back (its copy was stored earlier)")
	}

	// How far did the request go? As on the advisory path: never a second, opposite answer.
	state, ob, err := r.s.done.recall(ctx, d.reqSeq)
	if err != nil {
		return fmt.Errorf("reading the settled-requests memory for %d: %w", d.reqSeq, err)
	}
	switch {
	case state == settledPublishing:
		if err := r.s.finish(ctx, d, ob, log); err != nil {
			return err
		}
		return done("finished", "finished its interrupted settlement")
	case state == settledFinal || d.lane == job.Triage && state == settledRouted:
		if err := r.s.apply(ctx, d, plan{then: actRemove}, log); err != nil {
			return err
		}
		return done("removed", "removed it: its request was settled already")
	}
	moved, err := r.backlog.movedOn(ctx, d)
	if err != nil {
		return err
	}
	if moved {
		if err := r.s.apply(ctx, d, plan{then: actRemove}, log); err != nil {
			return err
		}
		return done("removed", "removed it: a later copy of its request is on its way")
	}

	// A lane message is handed back as a copy in its lane. A request on the request subject is not:
	// the worker may not publish requests (deploy/nats/accounts.conf), and what a request's headers
	// say is the API's; it is given up, answered and dead-lettered, for an operator's replay.
	if d.lane != job.Triage && r.s.cfg.MaxDeliver > 1 && orig.Header.Get(HeaderRescued) == "" {
		if err := r.requeue(ctx, d, orig); err != nil {
			return err
		}
		return done("retried", "handed it back as a new message")
	}
	d.deliveries = uint64(r.s.cfg.MaxDeliver)
	cause := errors.New("the request was stranded in the work queue: its consumer's state lost it in a crash and would never deliver it again")
	if err := r.s.settle(ctx, d, r.s.rules.gaveUpAfter(d.req, d.lane, d.deliveries, cause), facts{}, log); err != nil {
		return err
	}
	return done("gave_up", "gave it up (response and dead letter)")
}

// requeueID is the Nats-Msg-Id of a stranded lane message's copy: like routeID, it ends in a digest of
// when the server stored the stranded message, so no publisher can claim it in advance as a request's
// id in the duplicate window the requests stream shares.
func (r rules) requeueID(seq uint64, stored time.Time) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("rescue/%s/%d/%d", r.cfg.RequestsStream(), seq, stored.UnixNano())))
	return fmt.Sprintf("rescue/%s/%d/%x", r.cfg.RequestsStream(), seq, sum[:8])
}

// requeue stores a copy of a stranded message on its own subject, for a fresh round of deliveries, and
// removes the stranded one. A request's copy is a new request (triage does not take identities from a
// request's headers); a lane's copy keeps its request's (Mw-Request-Seq).
func (r *rescuer) requeue(ctx context.Context, d *delivery, orig *jetstream.RawStreamMsg) error {
	// On a subject of its own under the lane's (one message: the lane's --max-queued cap, which may be
	// what keeps the lane full, cannot refuse it), which the lane's consumer reads. Stream sequences
	// are unique, so it never meets another request's copy past the cap (those end in a request's).
	m := nats.NewMsg(r.s.cfg.Lane(d.lane).overflowSubject(d.seq))
	m.Data = orig.Data
	copyHeaders(m.Header, orig.Header)
	m.Header.Set(HeaderRescued, strconv.FormatUint(d.seq, 10))
	p := plan{events: []event{{msg: m, id: r.s.rules.requeueID(d.seq, orig.Time)}}, requeued: true, then: actRemove}
	if err := r.s.apply(ctx, d, p, r.log); err != nil {
		return fmt.Errorf("handing back stranded message %d: %w", d.seq, err)
	}
	return nil
}
