package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/jetstream"
)

// What one job writes to NATS (the scale model in docs/operations.md): a worker on its embedded
// server with the shipped defaults (reuse memory on), one job of each kind at a time, and a plain NATS
// subscription to every subject of the account, which sees every message any client publishes
// (requests, the worker's lane copies, key-value records, responses, object-store chunks, acks, pull
// requests) and every message the server delivers to a consumer. Each is counted by what it does to
// the streams: a stored message (on R3, one replicated entry written by three servers), a consumer
// state change (on a replicated consumer, one replicated entry too: a delivery, an ack, an
// InProgress, a pull request waiting), or a read (a direct get: no entry).

// tapped is one message the tap saw.
type tapped struct {
	subject, reply string
	hdr, data      int // bytes
	value          string
}

// writeClass is what a tapped message is, and whether it is a replicated write on R3.
type writeClass struct {
	name    string
	stored  bool // a message stored in a stream (an entry of the stream's group)
	state   bool // a consumer state change (an entry of the consumer's group)
	bytesOf bool // its bytes count as stored bytes
}

var (
	wcRequest   = writeClass{"request (the API's publish)", true, false, true}
	wcLaneCopy  = writeClass{"lane copy (triage's route)", true, false, true}
	wcRouted    = writeClass{"settled record: routed", true, false, true}
	wcOutbox    = writeClass{"settled record: outbox", true, false, true}
	wcFinal     = writeClass{"settled record: final", true, false, true}
	wcResponse  = writeClass{"response", true, false, true}
	wcVirus     = writeClass{"virus event", true, false, true}
	wcReuse     = writeClass{"reuse record", true, false, true}
	wcVerdict   = writeClass{"verdict record", true, false, true}
	wcObjChunk  = writeClass{"object store: chunks (only with --storage nats)", true, false, true}
	wcObjMeta   = writeClass{"object store: metadata (only with --storage nats)", true, false, true}
	wcOther     = writeClass{"other stored", true, false, true}
	wcDeliver   = writeClass{"deliveries by the shared durables (triage, lanes)", false, true, false}
	wcAck       = writeClass{"acks (+ACK; on the work queue also the message's removal)", false, true, false}
	wcWPI       = writeClass{"InProgress (+WPI)", false, true, false}
	wcNakTerm   = writeClass{"naks, terms", false, true, false}
	wcPull      = writeClass{"pull requests to the shared durables (two entries each on R3: waiting, done)", false, true, false}
	wcEphemeral = writeClass{"ordered consumers (R1, in memory: not replicated): deliveries and pull requests of the API's responses and the object-store downloads", false, false, false}
	wcRead      = writeClass{"reads (direct gets: key-value lookups)", false, false, false}
	wcAPI       = writeClass{"other JetStream API calls (info, lookups)", false, false, false}
	wcNotStored = writeClass{"not stored (progress, replies)", false, false, false}
)

var writeClasses = []writeClass{wcRequest, wcLaneCopy, wcRouted, wcOutbox, wcFinal, wcResponse, wcVirus, wcReuse, wcVerdict,
	wcObjChunk, wcObjMeta, wcOther, wcDeliver, wcAck, wcWPI, wcNakTerm, wcPull, wcEphemeral, wcRead, wcAPI, wcNotStored}

// ackStream is the stream of a $JS.ACK subject (v1: $JS.ACK.<stream>.<consumer>.…, 9 tokens; v2 has a
// domain and an account hash before the stream).
func ackStream(subject string) string {
	t := strings.Split(subject, ".")
	switch {
	case len(t) >= 12:
		return t[4]
	case len(t) >= 4:
		return t[2]
	}
	return ""
}

// classify says what m is; app is the subject prefix (--app), requests the requests stream (the
// shared durables' one: their deliveries, acks and pull requests are the replicated ones).
func classify(m tapped, app, requests string) writeClass {
	s := m.subject
	switch {
	case strings.HasPrefix(m.reply, "$JS.ACK."):
		if ackStream(m.reply) == requests {
			return wcDeliver
		}
		return wcEphemeral
	case strings.HasPrefix(s, "$JS.ACK."):
		switch {
		case strings.HasPrefix(m.value, "+WPI"):
			return wcWPI
		case strings.HasPrefix(m.value, "-NAK"), strings.HasPrefix(m.value, "+TERM"):
			return wcNakTerm
		}
		return wcAck
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."):
		if strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."+requests+".") {
			return wcPull
		}
		return wcEphemeral
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET."):
		return wcRead
	case strings.HasPrefix(s, "$JS."):
		return wcAPI
	case s == app+".media.optimize.request":
		return wcRequest
	case strings.HasPrefix(s, app+".media.optimize.work."):
		return wcLaneCopy
	case s == app+".media.optimize.response":
		return wcResponse
	case s == app+".media.optimize.response.virus":
		return wcVirus
	case strings.HasPrefix(s, "$KV.") && strings.Contains(s, "_MEDIA_SETTLED."):
		switch {
		case strings.HasPrefix(m.value, "{"):
			return wcOutbox
		case m.value == "routed":
			return wcRouted
		}
		return wcFinal
	case strings.HasPrefix(s, "$KV.") && strings.Contains(s, "_MEDIA_REUSE."):
		return wcReuse
	case strings.HasPrefix(s, "$KV.") && strings.Contains(s, "_MEDIA_VERDICTS."):
		return wcVerdict
	case strings.HasPrefix(s, "$O.") && strings.Contains(s, ".C."):
		return wcObjChunk
	case strings.HasPrefix(s, "$O.") && strings.Contains(s, ".M."):
		return wcObjMeta
	case strings.HasPrefix(s, "_INBOX."), strings.HasPrefix(s, app+".media.optimize.progress"), strings.HasPrefix(s, "$SYS."):
		return wcNotStored
	case strings.HasPrefix(s, "$KV."), strings.HasPrefix(s, app+"."):
		return wcOther
	}
	return wcNotStored
}

// natsJob is one kind of job the tap prices.
type natsJob struct {
	name, key, file string
	success         bool
}

// natsWrites is the phase "nats-writes".
func natsWrites(b *bencher) (err error) {
	w, err := bench.StartWorker(b.ctx, bench.WorkerOptions{Bin: b.bin, Dir: b.phaseDir("nats-writes", "worker"),
		ClamdAddr: b.clamd.SocketAddr, ImageJobs: b.parallel, VideoJobs: 1, Env: b.workerEnv, Reuse: true})
	if err != nil {
		return err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
	if err != nil {
		return err
	}
	defer c.Close()
	noisy, err := b.corpus.noisyPhotos(b.env, b.logf)
	if err != nil {
		return err
	}
	clip := func(name string) string {
		for _, cl := range b.corpus.Clips {
			if cl.Name == name {
				return cl.Path
			}
		}
		return ""
	}
	note := filepath.Join(b.work, "nats-writes", "note.txt")
	if err := os.WriteFile(note, []byte("a text file, not media: refused at triage\n"), 0o644); err != nil {
		return err
	}
	jobs := []natsJob{
		{"image (12 MP JPEG, new bytes)", "nw/photo.jpg", noisy[0].Path, true},
		{"image, the same bytes again (reused)", "nw/photo-again.jpg", noisy[0].Path, true},
		{fmt.Sprintf("video, transcode (1080p HEVC, %d s)", clipSeconds), "nw/clip.mov", clip("1080p-hevc.mov"), true},
		{fmt.Sprintf("video, remux (1080p H.264, %d s)", clipSeconds), "nw/clip.mp4", clip("1080p-h264.mp4"), true},
		{"refused in its lane (a text file: not media)", "nw/note.txt", note, false},
		{"no-op: answered at triage (no such object)", "nw/missing.jpg", "", false},
	}
	for _, j := range jobs {
		if j.key == "nw/missing.jpg" {
			continue // never uploaded
		}
		if j.file == "" {
			return fmt.Errorf("nats-writes: no corpus file for %s", j.name)
		}
		if err := c.Upload(b.ctx, j.key, j.file); err != nil {
			return err
		}
	}
	// The tap: every subject of the account, on the client's connection (NATS echoes a connection's
	// own publishes to its subscriptions, so the API side's request is heard too).
	var mu sync.Mutex
	var seen []tapped
	capturing := false
	stopTap, err := c.Tap(func(m jetstream.TapMsg) {
		mu.Lock()
		defer mu.Unlock()
		if !capturing {
			return
		}
		t := tapped{subject: m.Subject, reply: m.Reply, hdr: m.HeaderBytes, data: len(m.Data)}
		if strings.HasPrefix(m.Subject, "$JS.ACK.") || strings.Contains(m.Subject, "_MEDIA_SETTLED.") {
			t.value = string(m.Data[:min(len(m.Data), 8)])
		}
		seen = append(seen, t)
	})
	if err != nil {
		return err
	}
	defer stopTap()
	// One job of each kind, one at a time; what the settlement writes after the response (the final
	// record, the ack) comes within a moment, and the capture waits for it.
	const settle = 700 * time.Millisecond
	type result struct {
		counts map[string]int
		bytes  map[string]int
		took   time.Duration
		resp   int
	}
	results := make([]result, len(jobs))
	for i, jb := range jobs {
		mu.Lock()
		seen, capturing = nil, true
		mu.Unlock()
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
		job, err := c.Submit(ctx, jb.key)
		if err != nil {
			cancel()
			return err
		}
		a, werr := c.Wait(ctx, job)
		cancel()
		if werr != nil && (jb.success || a.At.IsZero()) {
			return fmt.Errorf("nats-writes %s: %w", jb.name, werr)
		}
		time.Sleep(settle)
		mu.Lock()
		capturing = false
		got := slices.Clone(seen)
		mu.Unlock()
		r := result{counts: map[string]int{}, bytes: map[string]int{}, took: a.At.Sub(job.Published)}
		for _, t := range got {
			wc := classify(t, "app", "APP_MEDIA_REQUESTS")
			r.counts[wc.name]++
			r.bytes[wc.name] += len(t.subject) + t.hdr + t.data
			if wc == wcResponse {
				r.resp = t.data
			}
		}
		results[i] = r
		b.logf("nats-writes %s: %d messages seen in %s", jb.name, len(got), r.took.Round(time.Millisecond))
	}

	// The table: per class, count (bytes) per job kind; then the replicated entries per job on R3.
	header := []string{"per job"}
	for _, jb := range jobs {
		header = append(header, jb.name)
	}
	var rows [][]string
	entries := make([]int, len(jobs))
	entriesS3 := make([]int, len(jobs))
	storedBytes := make([]int, len(jobs))
	storedBytesS3 := make([]int, len(jobs))
	for _, wc := range writeClasses {
		row := []string{wc.name}
		any := false
		for i := range jobs {
			n, by := results[i].counts[wc.name], results[i].bytes[wc.name]
			if n > 0 {
				any = true
			}
			cell := "–"
			if n > 0 {
				cell = fmt.Sprintf("%d (%s)", n, sizeOf(by))
				if !wc.bytesOf {
					cell = fmt.Sprint(n)
				}
			}
			row = append(row, cell)
			e := 0
			switch {
			case wc == wcPull:
				e = 2 * n
			case wc == wcAck:
				e = n // and, on the requests stream (a work queue), the message's removal: counted below
			case wc.stored || wc.state:
				e = n
			}
			entries[i] += e
			if wc.bytesOf {
				storedBytes[i] += by
			}
			if wc != wcObjChunk && wc != wcObjMeta {
				entriesS3[i] += e
				if wc.bytesOf {
					storedBytesS3[i] += by
				}
			}
		}
		if any {
			rows = append(rows, row)
		}
	}
	// Work-queue removals: the request (triage's ack) and the lane copy (the lane's ack) leave the
	// requests stream by a delete entry of its group.
	for i := range jobs {
		wq := results[i].counts[wcRequest.name] + results[i].counts[wcLaneCopy.name]
		entries[i] += wq
		entriesS3[i] += wq
	}
	sum := func(label string, vals []int, f func(int) string) {
		row := []string{label}
		for _, v := range vals {
			row = append(row, f(v))
		}
		rows = append(rows, row)
	}
	// Issue 23's count: the messages a request's settlement stores in streams (the request, the lane
	// copy, the settled records, the events), without the reuse memory's record, which only a new
	// upload writes and --no-reuse drops, nor the object store's.
	path := make([]int, len(jobs))
	for i := range jobs {
		for _, wc := range []writeClass{wcRequest, wcLaneCopy, wcRouted, wcOutbox, wcFinal, wcResponse, wcVirus} {
			path[i] += results[i].counts[wc.name]
		}
	}
	sum("**stream writes on the request's path** (request, lane copy, settled records, response; target ≤ 4)", path, func(v int) string { return fmt.Sprintf("**%d**", v) })
	sum("**replicated entries on R3, S3 storage** (stored + work-queue removals + consumer state; pull requests ×2)", entriesS3, func(v int) string { return fmt.Sprintf("**%d**", v) })
	sum("**stored bytes, S3 storage** (subject + headers + payload, once; ×3 on R3)", storedBytesS3, func(v int) string { return "**" + sizeOf(v) + "**" })
	sum("replicated entries, `--storage nats` (the job's object-store writes too)", entries, func(v int) string { return fmt.Sprint(v) })
	sum("stored bytes, `--storage nats`", storedBytes, sizeOf)
	var took []string
	for i, jb := range jobs {
		took = append(took, fmt.Sprintf("%s %s (response %s)", jb.name, ms(results[i].took.Seconds()), sizeOf(results[i].resp)))
	}
	b.rep.section("NATS writes per job (the scale model's input)",
		"What one job makes the NATS server store, counted rather than estimated: a worker on its embedded server with "+
			"the shipped defaults (reuse memory on, S3 or the JetStream object store), one job of each kind at a time, and a plain "+
			"subscription to every subject of the account (`>`), which sees every message any client publishes and every message the "+
			"server delivers to a consumer, from the request's publish until the settlement's last write (%s after the response). "+
			"*Stored* messages are entries of a stream's group on a replicated cluster (R3: written by three servers); consumer "+
			"state changes (a delivery, an ack, an InProgress, a pull request waiting and done) are entries of the consumer's group "+
			"on R3 for the shared durables (triage's and the lanes': nats-server 2.15's consumer.go proposes each); an ack on the requests stream, a work queue, also removes the "+
			"message, one more entry of the stream's group; ordered consumers (the API's listener, the object store's downloads) are "+
			"R1 in memory and direct gets (key-value lookups) are reads: neither writes. Counts include the API's "+
			"side of the test client (its request) and the pull requests "+
			"the worker's idle loops renew meanwhile (one every 10 s per idle slot, 7 loops: triage 4, image 2, video 1). Bytes "+
			"are subject + headers + payload as published; the object store's rows are the job's uploads of its variants (and, "+
			"for the reused image, the copies), which S3 storage keeps out of NATS. docs/operations.md (*Scale model*) turns these "+
			"into writes/s and bytes/s per 1,000 jobs/min.\n\n%s\nJob times (publish → response, on this loaded machine): %s.",
		ms(settle.Seconds()), table(header, rows), strings.Join(took, "; "))
	return nil
}

func sizeOf(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
