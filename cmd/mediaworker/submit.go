package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gabriel-vasile/mimetype"
	"github.com/google/uuid"
	"github.com/mattn/go-isatty"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore"
)

func cmdSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.DefaultConfig()
	c := newCommand("submit", "Upload each FILE to the object store (bucket created if missing), publish an optimize request\nwith a new mediaId, and with --wait print every response and virus event as one JSON line on\nstdout. Exit status: 0 all succeeded, 3 some did not, 2 usage error, 1 anything else.", "FILE...")
	bindCommon(c, &cfg)
	var (
		wait    bool
		bucket  = "media"
		dir     = "uploads"
		timeout = 10 * time.Minute
	)
	c.fs.BoolVar(&wait, "wait", false, "wait for each response and print it")
	c.fs.StringVar(&bucket, "bucket", bucket, "bucket to upload into")
	c.fs.StringVar(&dir, "dir", dir, "key prefix: files are uploaded as <dir>/<file name>")
	durationVar(c.fs, &timeout, "timeout", "with --wait, how long to wait for all responses")
	recipe := ""
	c.fs.StringVar(&recipe, "recipe", "", "the recipe (output set) each request names, as the worker's config file defines it; empty: the default")
	c.bindConfig()
	files, code, ok := parseOrUsage(c, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "mediaworker submit: name at least one FILE\n\nRun 'mediaworker submit --help' for usage.")
		return exitUsage
	}
	if err := contracts.ValidateApp(cfg.Streams.App); err != nil {
		fmt.Fprintf(stderr, "mediaworker submit: %v\n", err)
		return exitUsage
	}
	if recipe != "" {
		if err := contracts.ValidateName(recipe); err != nil {
			fmt.Fprintf(stderr, "mediaworker submit: --recipe %v\n", err)
			return exitUsage
		}
	}
	ctx, stop, js, err := connectJS(ctx, cfg, "mediaworker submit", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker submit: %v\n", err)
		return exitFailure
	}
	defer stop()
	store, err := app.OpenStore(ctx, cfg, js)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker submit: %v\n", err)
		return exitFailure
	}
	defer store.Close()
	if err := store.EnsureBucket(ctx, bucket); err != nil {
		fmt.Fprintf(stderr, "mediaworker submit: creating bucket %q: %v\n", bucket, err)
		return exitFailure
	}

	client := natsjs.NewClient(js, cfg.Streams)
	w := newWaiter(stdout, stderr)
	if wait {
		// Listening before publishing, so no response can slip past; the answers come in order, a
		// virus event before the response that settles its mediaId.
		stop, err := client.Listen(w.onAnswer)
		if err != nil {
			fmt.Fprintf(stderr, "mediaworker submit: %v\n", err)
			return exitFailure
		}
		defer stop()
	}

	for _, f := range files {
		id := uuid.NewString()
		key := path.Join(dir, filepath.Base(f))
		w.expect(id, f) // before publishing: the virus event can beat us back
		if err := submitOne(ctx, client, store, bucket, key, id, recipe, f); err != nil {
			fmt.Fprintf(stderr, "mediaworker submit: %s: %v\n", f, err)
			return exitFailure
		}
		fmt.Fprintf(stderr, "submitted %s as mediaId %s (%s/%s)\n", f, id, bucket, key)
	}
	if !wait {
		return exitOK
	}
	return w.wait(ctx, timeout, stderr)
}

func submitOne(ctx context.Context, client *natsjs.Client, store objstore.Store, bucket, key, id, recipe, file string) error {
	mt, err := mimetype.DetectFile(file)
	if err != nil {
		return fmt.Errorf("reading file: %w", err)
	}
	if _, err := objstore.UploadFile(ctx, store, bucket, key, file, mt.String()); err != nil {
		return fmt.Errorf("uploading: %w", err)
	}
	req := contracts.Request{S3Key: key, S3Bucket: bucket, MediaID: id, MediaURL: store.URL(bucket, key), Recipe: recipe}
	if err := req.Validate(); err != nil {
		return err
	}
	return client.Submit(ctx, req)
}

// waiter collects responses for the mediaIds submitted and prints each as one JSON line.
type waiter struct {
	mu      sync.Mutex
	out     io.Writer
	status  io.Writer // progress goes here: a bar on a terminal, plain lines otherwise
	tty     bool
	bars    bool               // a progress line is on screen and must be cleared before other output
	pending map[string]string  // mediaId → file
	shown   map[string]float64 // mediaId → the percent shown last: the bar never goes back
	failed  int
	done    chan struct{}
}

func newWaiter(out, status io.Writer) *waiter {
	tty := false
	if f, ok := status.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	return &waiter{out: out, status: status, tty: tty, pending: map[string]string{}, shown: map[string]float64{}, done: make(chan struct{}, 1)}
}

func (w *waiter) expect(id, file string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending[id] = file
}

// onAnswer takes what the worker sent about a request: a virus event or a response is printed, a
// progress report shown.
func (w *waiter) onAnswer(a natsjs.Answer) {
	switch a.Kind {
	case natsjs.AnswerResponse, natsjs.AnswerVirus:
		w.onMsg(a.Data)
	case natsjs.AnswerProgress:
		w.onProgress(a.Data)
	}
}

func (w *waiter) onMsg(data []byte) {
	var probe struct {
		MediaID   string `json:"mediaId"`
		VirusName string `json:"virusName"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if probe.VirusName != "" { // a virus event: print it; the response follows
		if _, ok := w.pending[probe.MediaID]; ok {
			fmt.Fprintln(w.out, strings.TrimSpace(string(data)))
		}
		return
	}
	var r contracts.Response
	if json.Unmarshal(data, &r) != nil {
		return
	}
	if _, ok := w.pending[r.MediaID]; !ok {
		return // someone else's request
	}
	w.settle(r)
}

// onProgress shows a video's progress: an updating bar on a terminal, a plain line otherwise.
func (w *waiter) onProgress(data []byte) {
	var p contracts.Progress
	if json.Unmarshal(data, &p) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	file, ok := w.pending[p.MediaID]
	if !ok {
		return
	}
	// A job with several ffmpeg runs (a recipe's renditions after the MP4) reports each from its start,
	// and reports can arrive late: the bar shows the furthest point reached, within 0–100.
	pct := min(max(p.Percent, w.shown[p.MediaID], 0), 100)
	if prev, seen := w.shown[p.MediaID]; seen && (pct == prev || !w.tty && int(pct) == int(prev)) {
		return // nothing new to show
	}
	w.shown[p.MediaID] = pct
	if !w.tty {
		fmt.Fprintf(w.status, "progress %s %.0f%%\n", file, pct)
		return
	}
	const width = 30
	done := int(pct / 100 * width)
	fmt.Fprintf(w.status, "\r\033[K%-24s [%s%s] %5.1f%%", clip(filepath.Base(file), 24),
		strings.Repeat("#", done), strings.Repeat(".", width-done), pct)
	w.bars = true
}

// settle prints r and marks it done; w.mu is held.
func (w *waiter) settle(r contracts.Response) {
	if w.bars {
		fmt.Fprint(w.status, "\r\033[K")
		w.bars = false
	}
	line, _ := json.Marshal(r)
	fmt.Fprintln(w.out, string(line))
	if !r.Success {
		w.failed++
	}
	delete(w.pending, r.MediaID)
	delete(w.shown, r.MediaID)
	if len(w.pending) == 0 {
		select {
		case w.done <- struct{}{}:
		default:
		}
	}
}

func (w *waiter) wait(ctx context.Context, timeout time.Duration, stderr io.Writer) int {
	w.mu.Lock()
	n := len(w.pending)
	w.mu.Unlock()
	if n > 0 {
		select {
		case <-w.done:
		case <-time.After(timeout):
		case <-ctx.Done():
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) > 0 {
		for id, f := range w.pending {
			fmt.Fprintf(stderr, "no response for %s (mediaId %s)\n", f, id)
		}
		return exitFailure
	}
	if w.failed > 0 {
		return exitNotAll
	}
	return exitOK
}
