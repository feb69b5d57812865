package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
)

// objectsCSP forbids everything a document could do: a variant is an image or a video, never a page,
// so even a browser that rendered one as HTML would run no script and load nothing.
const objectsCSP = "default-src 'none'; sandbox"

// handleObject serves a variant this worker wrote from the NATS object store, so the URLs in responses
// work out of the box in the embedded default. Put a CDN or a real S3 in front for anything public.
//
// Only outputs are served: the key must have the layout of an output key (contracts.OutputContentType,
// which also gives the content type: the stored one is never used), the object must carry the marker
// the pipeline sets when it uploads (objstore.VariantHeader), and the quarantine bucket is never read.
// So an original upload (whatever it contains), a quarantined file or another writer's object under a
// variant-looking key all answer 404. Range requests and conditional GETs work (http.ServeContent), at
// most maxRanges ranges at a time, each read from where it starts (app/ranges.go).
func (a *App) handleObject(w http.ResponseWriter, r *http.Request) {
	bucket, key := r.PathValue("bucket"), r.PathValue("key")
	// A directory signature rides in the path (SignObjectPrefixURL), for files that name each other by
	// relative URL; only those may carry one.
	plain, expires, sig, prefixSigned := splitPrefixToken(key)
	if prefixSigned && !contracts.SignsPrefix(plain) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	key = plain
	ctype, ok := contracts.OutputContentType(key)
	if !ok || objstore.ValidateKey(key) != nil || contracts.ValidateBucket(bucket) != nil ||
		(a.cfg.Pipeline.QuarantineBucket != "" && bucket == a.cfg.Pipeline.QuarantineBucket) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if secret := a.cfg.URLSigning.Key; secret != "" {
		verify := func() error { return verifyObjectURL(secret, key, r.URL.Query(), time.Now()) }
		if prefixSigned {
			verify = func() error { return verifyObjectPrefix(secret, key, expires, sig, time.Now()) }
		}
		if err := verify(); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
	}
	info, err := a.store.Stat(r.Context(), bucket, key)
	if err != nil {
		if objstore.IsPermanent(err) {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		http.Error(w, "object store unavailable", http.StatusServiceUnavailable)
		return
	}
	if !info.Variant {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", objectsCSP)
	h.Set("Cross-Origin-Resource-Policy", "cross-origin") // variants are meant to be embedded by the site
	// ... and HLS players and VTT tracks fetch them with XHR/fetch from the site's own origin. No
	// credentials are involved: the URL (signed, when signing is on) is all a reader needs.
	h.Set("Access-Control-Allow-Origin", "*")
	// Outputs are rewritten only by a retry of the same request, with the same content: size and write
	// time identify a version.
	h.Set("ETag", fmt.Sprintf(`"%x-%x"`, info.Size, info.ModTime.UnixNano()))
	spans, header, honour := boundRanges(r.Header.Get("Range"), info.Size)
	switch {
	case !honour:
		r = withRange(r, "") // see maxRanges
	case header != r.Header.Get("Range"):
		r = withRange(r, header)
	}
	rs := newObjectReader(r.Context(), a.store, info, spans)
	defer rs.Close()
	http.ServeContent(&progressWriter{ResponseWriter: w, rc: http.NewResponseController(w)}, r, "", info.ModTime, rs)
}

// writeStall is the longest one write to a client may block: a client that stops reading is dropped,
// one that reads slowly is not (unlike http.Server's WriteTimeout, which bounds the whole response).
const writeStall = 30 * time.Second

// progressWriter gives every write to the client its own deadline.
type progressWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (p *progressWriter) Write(b []byte) (int, error) {
	_ = p.rc.SetWriteDeadline(time.Now().Add(writeStall))
	return p.ResponseWriter.Write(b)
}

// objectReader is an io.ReadSeeker over a stored object for http.ServeContent, without a temp file
// and without holding the object in memory: Seek only moves the offset, and the first Read after a
// Seek streams from the store through a pipe, starting at the offset (objstore.GetRange: a ranged GET
// on S3, the chunks holding it in the JetStream object store), so a range near the end of a large MP4
// costs that range, not the object up to there. Memory stays at one chunk or one batch of them.
//
// ServeContent seeks to each range's start and reads its length; spans (from boundRanges) gives those
// lengths by start, so each stream asks the store for exactly one range. Any other read streams to the
// end of the object, and is stopped by the next Seek or Close.
type objectReader struct {
	ctx   context.Context
	store objstore.Store
	info  objstore.Info
	spans map[int64]int64

	pos    int64          // offset the next Read returns
	pr     *io.PipeReader // current stream, positioned at pos; nil: none
	cancel func()         // ends the current stream's read, even while it waits for the store
	done   chan struct{}  // closed when the current stream's read has returned
}

func newObjectReader(ctx context.Context, s objstore.Store, info objstore.Info, spans map[int64]int64) *objectReader {
	return &objectReader{ctx: ctx, store: s, info: info, spans: spans}
}

func (o *objectReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = o.pos + offset
	case io.SeekEnd:
		abs = o.info.Size + offset
	default:
		return o.pos, errors.New("seeking: invalid whence")
	}
	if abs < 0 {
		return o.pos, errors.New("seeking: negative position")
	}
	if abs != o.pos {
		o.stop()
		o.pos = abs
	}
	return abs, nil
}

func (o *objectReader) Read(p []byte) (int, error) {
	for {
		if o.pos >= o.info.Size {
			return 0, io.EOF
		}
		if o.pr == nil {
			o.start()
		}
		n, err := o.pr.Read(p)
		o.pos += int64(n)
		if err == io.EOF && n == 0 && o.pos < o.info.Size {
			o.stop() // a span's stream ended; a read past it streams on from there
			continue
		}
		return n, err
	}
}

func (o *objectReader) start() {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(o.ctx)
	done := make(chan struct{})
	o.pr, o.cancel, o.done = pr, cancel, done
	off, n := o.pos, o.info.Size-o.pos
	if l, ok := o.spans[off]; ok && l > 0 {
		n = l
	}
	go func() {
		defer close(done)
		_, err := objstore.GetRange(ctx, o.store, o.info, off, n, pw)
		pw.CloseWithError(err) // nil: EOF for the reader
	}()
}

// stop ends the current stream and waits for its read, so no goroutine outlives the request.
func (o *objectReader) stop() {
	if o.pr == nil {
		return
	}
	o.cancel()
	o.pr.CloseWithError(errors.New("reader closed"))
	<-o.done
	o.pr, o.cancel, o.done = nil, nil, nil
}

// Close stops any stream; it is idempotent.
func (o *objectReader) Close() error {
	o.stop()
	return nil
}
