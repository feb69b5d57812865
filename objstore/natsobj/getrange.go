package natsobj

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/objstore"
)

// Reading part of an object without reading what comes before it (objstore.RangeGetter).
//
// An object's chunks are the messages on its chunk subject, in order, each ChunkSize bytes but the
// last. Their stream sequences are recorded nowhere, and other objects' chunks may lie between them
// (the jobs of one bucket upload side by side), so the chunk holding an offset is found by asking the
// stream: a batched direct get (nats-server 2.11 and later) of the first chunk at or after a sequence
// also says how many of the object's chunks follow it (Nats-Num-Pending), which gives that chunk's
// index. The first guess (the last chunk's sequence minus the chunks after the one wanted) is right
// when the object's chunks are contiguous, the usual case; otherwise a binary search over sequences
// finds it, each step one chunk fetched. From there the range is read with batched direct gets: no
// consumer is created, and the server reads only the chunks asked for.
//
// Offsets follow from indexes only when every chunk but the last is full. This package's Put makes
// them so; nats.go's ObjectStore.Put stores whatever each Read returned, so a short chunk is possible.
// The last chunk tells: of C chunks of at most ChunkSize bytes, it holds size-(C-1)*ChunkSize exactly
// when all the others are full. An object that fails that test, a bucket without direct gets or a
// server without batches is read from its start up to the range, as Get would.
//
// A range cannot be checked against the object's SHA-256 digest (that takes every byte); each chunk's
// index and length are checked instead.

var _ objstore.RangeGetter = (*Store)(nil)

// errCannotSeek says the object cannot be read from the middle; read it from its start.
var errCannotSeek = errors.New("object cannot be read from the middle")

// rangeProbes bounds the binary search for a chunk: sequences are 64 bits, so a search that has not
// ended by then means the stream changed under it.
const rangeProbes = 64

// GetRange streams bytes [off, off+n) of the version info (from Stat) describes into w. If that
// version is gone (overwritten or deleted since the Stat) before a byte was written, it reads the
// object's current version, as GetStatted does.
func (s reader) GetRange(ctx context.Context, info objstore.Info, off, n int64, w io.Writer) (int64, error) {
	got, err := s.getRange(ctx, info, off, n, w)
	if err != nil {
		return got, fmt.Errorf("getting bytes %d-%d of %s/%s: %w", off, off+n-1, info.Bucket, info.Key, err)
	}
	return got, nil
}

func (s reader) getRange(ctx context.Context, info objstore.Info, off, n int64, w io.Writer) (int64, error) {
	if err := objstore.CheckRange(info.Size, off, n); err != nil || n == 0 {
		return 0, err
	}
	oi, statted := info.Sys.(*jetstream.ObjectInfo)
	statted = statted && oi.Bucket == info.Bucket && oi.Name == info.Key
	if statted {
		got, err := s.readRange(ctx, oi, off, n, w)
		if !errors.Is(err, errGone) || got > 0 {
			return got, err
		}
	}
	octx, cancel := s.opContext(ctx)
	oi, err := s.info(octx, info.Bucket, info.Key)
	cancel()
	if err != nil {
		return 0, err
	}
	return s.readRange(ctx, oi, off, n, w)
}

// readRange reads [off, off+n) of the version oi describes: by chunk sequence where it can, else from
// the start.
func (s reader) readRange(ctx context.Context, oi *jetstream.ObjectInfo, off, n int64, w io.Writer) (int64, error) {
	size := int64(oi.Size)
	if err := objstore.CheckRange(size, off, n); err != nil {
		return 0, err
	}
	if off == 0 && n == size {
		return s.read(ctx, oi, w) // all of it: checked against its digest
	}
	var cs int64
	if oi.Opts != nil {
		cs = int64(oi.Opts.ChunkSize)
	}
	if oi.Chunks > 1 && cs > 0 && int64(oi.Chunks) == (size+cs-1)/cs {
		got, err := s.seekRange(ctx, oi, cs, off, n, w)
		if !errors.Is(err, errCannotSeek) || got > 0 {
			return got, err
		}
	}
	return objstore.ReadWindow(ctx, off, n, w, func(ctx context.Context, w io.Writer) (int64, error) {
		return s.read(ctx, oi, w)
	})
}

// chunkSeeker reads one object version's chunks by index.
type chunkSeeker struct {
	s       reader
	api     string // the stream's direct-get subject
	subject string // the version's chunk subject
	count   uint64 // its chunks
}

// chunk is one chunk of an object as a direct get returned it.
type chunk struct {
	seq, index uint64
	data       []byte
}

func (s reader) seekRange(ctx context.Context, oi *jetstream.ObjectInfo, cs, off, n int64, w io.Writer) (int64, error) {
	octx, cancel := s.opContext(ctx)
	b, _, err := s.bind(octx, oi.Bucket, true)
	cancel()
	if err != nil {
		return 0, err
	}
	if ci := b.stream.CachedInfo(); ci == nil || !ci.Config.AllowDirect {
		return 0, errCannotSeek
	}
	c := &chunkSeeker{s: s, api: apiPrefix(s.js) + "DIRECT.GET." + streamPrefix + oi.Bucket,
		subject: fmt.Sprintf(chunkSubjectFmt, oi.Bucket, oi.NUID), count: uint64(oi.Chunks)}

	// The last chunk: its length shows whether the others are full, its sequence bounds the search.
	size, lastIdx := int64(oi.Size), int64(oi.Chunks)-1
	var last *jetstream.RawStreamMsg
	octx, cancel = s.opContext(ctx)
	err = s.withStream(octx, oi.Bucket, true, func(st jetstream.Stream) (err error) {
		last, err = st.GetLastMsgForSubject(octx, c.subject)
		return err
	})
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, errGone
	case err != nil:
		return 0, fmt.Errorf("reading the last chunk: %w", err)
	case int64(len(last.Data)) != size-lastIdx*cs:
		return 0, errCannotSeek // a short chunk before it: offsets cannot be computed
	}

	var written int64
	put := func(idx int64, data []byte) error {
		want := cs
		if idx == lastIdx {
			want = int64(len(last.Data))
		}
		if int64(len(data)) != want {
			return fmt.Errorf("chunk %d holds %d bytes, want %d (object changed while it was read?)", idx, len(data), want)
		}
		start := idx * cs
		lo, hi := max(off, start)-start, min(off+n, start+want)-start
		m, err := w.Write(data[lo:hi])
		written += int64(m)
		return err
	}
	first, end := off/cs, (off+n-1)/cs
	if first == lastIdx {
		err := put(lastIdx, last.Data)
		return written, err
	}
	ch, err := c.locate(ctx, uint64(first), last.Sequence)
	if err != nil {
		return 0, err
	}
	if err := put(first, ch.data); err != nil {
		return written, err
	}
	// The rest, in batches of at most getBatch chunks (2 MiB held at once), the last chunk from memory.
	idx, seq := first, ch.seq
	for idx < min(end, lastIdx-1) {
		batch := int(min(min(end, lastIdx-1)-idx, getBatch))
		got := 0
		err := c.get(ctx, seq+1, batch, func(ch chunk) error {
			if ch.index != uint64(idx+1) {
				return fmt.Errorf("chunk %d came after chunk %d (object changed while it was read?)", ch.index, idx)
			}
			idx, seq, got = idx+1, ch.seq, got+1
			return put(idx, ch.data)
		})
		if err != nil {
			return written, err
		}
		if got == 0 {
			return written, fmt.Errorf("no chunk after chunk %d (object changed while it was read?)", idx)
		}
	}
	if end == lastIdx {
		if err := put(lastIdx, last.Data); err != nil {
			return written, err
		}
	}
	return written, nil
}

// locate fetches chunk k, given the sequence of the object's last chunk.
func (c *chunkSeeker) locate(ctx context.Context, k, lastSeq uint64) (chunk, error) {
	// Chunk k's sequence lies in [lo, hi]: sequences start at 1 and k chunks come before it, and the
	// count-1-k after it end at lastSeq. hi is exact when the chunks are contiguous; lo, tried next,
	// finds where the object starts.
	lo, hi := k+1, lastSeq-(c.count-1-k)
	probe := hi
	for i := range rangeProbes {
		var got *chunk
		if err := c.get(ctx, probe, 1, func(ch chunk) error { got = &ch; return nil }); err != nil {
			return chunk{}, err
		}
		switch {
		case got == nil:
			return chunk{}, errGone
		case got.index == k:
			return *got, nil
		case got.index > k: // chunk k comes before the probe, and at least index-k before got
			hi = min(probe-1, got.seq-(got.index-k))
		default: // at least k-index after got
			lo = got.seq + (k - got.index)
		}
		if lo > hi {
			return chunk{}, fmt.Errorf("chunk %d is not where the others say (object changed while it was read?)", k)
		}
		if probe = lo + (hi-lo)/2; i == 0 {
			probe = lo
		}
	}
	return chunk{}, fmt.Errorf("chunk %d not found in %d probes", k, rangeProbes)
}

// directGetRequest is the body of a JetStream direct get (nats-server's JSApiMsgGetRequest).
type directGetRequest struct {
	Seq     uint64 `json:"seq"`
	NextFor string `json:"next_by_subj"`
	Batch   int    `json:"batch"`
}

// get asks the stream for up to batch of the object's chunks from sequence seq on and calls fn with each,
// in order. It returns once batch chunks came or the server ended the batch early.
func (c *chunkSeeker) get(ctx context.Context, seq uint64, batch int, fn func(chunk) error) error {
	nc := c.s.js.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("subscribing for chunks: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }() // a batch's end-of-batch marker may still be on its way
	req, err := json.Marshal(directGetRequest{Seq: seq, NextFor: c.subject, Batch: batch})
	if err != nil {
		return err
	}
	if err := nc.PublishRequest(c.api, inbox, req); err != nil {
		return fmt.Errorf("asking for chunks: %w", err)
	}
	for got := 0; got < batch; got++ {
		m, err := c.s.nextReply(ctx, sub)
		if err != nil {
			return err
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			switch status := m.Header.Get("Status"); status {
			case "204": // end of batch, early: the stream holds no more
				return nil
			case "404":
				return errGone
			case "503":
				return nats.ErrNoResponders
			default:
				return fmt.Errorf("direct get: %s %s", status, m.Header.Get("Description"))
			}
		}
		pending, perr := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
		mseq, serr := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		switch {
		case perr != nil && got == 0:
			return errCannotSeek // a server without batched direct gets (before 2.11)
		case perr != nil || serr != nil:
			return fmt.Errorf("direct get: a chunk without its sequence or pending count")
		case pending >= c.count:
			return fmt.Errorf("%d chunks follow one of an object of %d (object changed while it was read?)", pending, c.count)
		}
		if err := fn(chunk{seq: mseq, index: c.count - 1 - pending, data: m.Data}); err != nil {
			return err
		}
	}
	return nil
}

// nextReply waits for the next message on sub, at most Timeout, and reports ctx's own error when ctx
// ended.
func (s reader) nextReply(ctx context.Context, sub *nats.Subscription) (*nats.Msg, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	m, err := sub.NextMsgWithContext(wctx)
	switch {
	case err == nil:
		return m, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case wctx.Err() != nil:
		return nil, fmt.Errorf("no chunk for %s: stream stalled", s.cfg.Timeout)
	}
	return nil, fmt.Errorf("reading chunks: %w", err)
}

// apiPrefix is the JetStream API prefix js sends requests with ("$JS.API." unless a domain or prefix
// was set).
func apiPrefix(js jetstream.JetStream) string {
	switch o := js.Options(); {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
