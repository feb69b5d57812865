package natsobj_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
)

// apiCalls records the JetStream API requests the store's connection makes, as the server sees them:
// a plain subscriber on $JS.API.> receives every request beside the server's own handler.
type apiCalls struct {
	nc   *nats.Conn
	from string // "": every request; else only those whose reply inbox starts with it
	mu   sync.Mutex
	subs []string
}

func watchAPI(t *testing.T, js jetstream.JetStream) *apiCalls {
	return watchAPIFrom(t, js, "")
}

// watchAPIFrom records only the requests of the connection whose inbox prefix is from: a request
// reaches the watcher's connection in its own time, possibly after the requester had its answer, so
// requests of another connection (a Put's, a Stat's) may arrive late and must not be counted.
func watchAPIFrom(t *testing.T, js jetstream.JetStream, from string) *apiCalls {
	t.Helper()
	nc, err := nats.Connect(js.Conn().ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a := &apiCalls{nc: nc, from: from}
	if _, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if !strings.HasPrefix(m.Reply, a.from) {
			return
		}
		a.mu.Lock()
		a.subs = append(a.subs, m.Subject)
		a.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

// take returns the requests made since the last take. The server queued each request for this
// subscriber before answering it, and the flush's PONG comes after what was queued before it.
func (a *apiCalls) take(t *testing.T) []string {
	t.Helper()
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.subs
	a.subs = nil
	return out
}

// TestGetStatted: reading the version a Stat found skips the second metadata lookup — a one-chunk
// object is one direct get of its chunk, several chunks still go through an ordered consumer, and a
// head read of them is direct gets of the chunks it needs — and
// reads the same bytes as Get; tampered data is refused; a version overwritten or deleted since the
// Stat is read (or reported missing) exactly as Get would.
// awaitCalls takes requests until done says the ones awaited have all arrived (they may arrive after
// the call that made them returned), and returns them.
func (a *apiCalls) awaitCalls(t *testing.T, done func([]string) bool) []string {
	t.Helper()
	var calls []string
	testenv.Eventually(t, 5*time.Second, func() error {
		calls = append(calls, a.take(t)...)
		if !done(calls) {
			return fmt.Errorf("requests so far: %q", calls)
		}
		return nil
	})
	return append(calls, a.take(t)...)
}

func TestGetStatted(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	// GetStatted reads through a connection of its own, so the watcher counts its requests alone.
	rc, err := nats.Connect(js.Conn().ConnectedUrl(), nats.CustomInboxPrefix("_GETSTATTED"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	rjs, err := jetstream.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	reader := newStore(t, rjs, natsobj.DefaultConfig())
	api := watchAPIFrom(t, js, "_GETSTATTED.")
	// The reader opens the bucket on first use; that is not GetStatted's cost.
	if err := reader.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Stat(ctx, "media", "absent"); err == nil {
		t.Fatal("a Stat of an absent key found it")
	}
	stream, err := js.Stream(ctx, "OBJ_media")
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1000, 300 << 10} { // one chunk; three chunks of 128 KiB
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("statted/%d.bin", size)
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i * 7)
			}
			if err := s.Put(ctx, "media", key, bytes.NewReader(data), int64(size), "application/octet-stream"); err != nil {
				t.Fatal(err)
			}
			info, err := s.Stat(ctx, "media", key)
			if err != nil {
				t.Fatal(err)
			}
			// The digest the download checks, which the pipeline takes instead of hashing again.
			if sum := sha256.Sum256(data); !bytes.Equal(info.SHA256, sum[:]) {
				t.Errorf("Stat's SHA256 %x, want the content's %x", info.SHA256, sum)
			}
			api.take(t)
			var got bytes.Buffer
			n, err := objstore.GetStatted(ctx, reader, info, &got)
			if err != nil || n != int64(size) || !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("GetStatted = %d, %v (same bytes: %v)", n, err, bytes.Equal(got.Bytes(), data))
			}
			calls := api.awaitCalls(t, func(calls []string) bool {
				for _, c := range calls {
					if strings.HasPrefix(c, "$JS.API.DIRECT.GET.OBJ_media.$O.media.C.") || strings.HasPrefix(c, "$JS.API.CONSUMER.CREATE.") {
						return true
					}
				}
				return false
			})
			for _, c := range calls {
				if strings.Contains(c, ".$O.media.M.") {
					t.Errorf("GetStatted looked the metadata up again: %s", c)
				}
			}
			creates := 0
			for _, c := range calls {
				if strings.HasPrefix(c, "$JS.API.CONSUMER.CREATE.") {
					creates++
				}
			}
			if size <= 128<<10 {
				if len(calls) != 1 || !strings.HasPrefix(calls[0], "$JS.API.DIRECT.GET.OBJ_media.$O.media.C.") {
					t.Errorf("GetStatted of one chunk made %q, want one direct get of the chunk", calls)
				}
			} else if creates != 1 {
				t.Errorf("GetStatted of %d chunks made %q, want one chunk consumer", (size+128<<10-1)/(128<<10), calls)
			}

			// Triage's head read: direct gets of the chunks it needs, no consumer to create and delete
			// for an object of several chunks (1.49 ms instead of 0.39 ms on a 7.8 MB upload).
			api.take(t)
			head, err := objstore.ReadHeadStatted(ctx, reader, info, 512)
			if err != nil || !bytes.Equal(head, data[:512]) {
				t.Fatalf("ReadHeadStatted = %d bytes, %v", len(head), err)
			}
			calls = api.awaitCalls(t, func(calls []string) bool {
				for _, c := range calls {
					if strings.HasPrefix(c, "$JS.API.DIRECT.GET.OBJ_media") {
						return true
					}
				}
				return false
			})
			for _, c := range calls {
				if strings.HasPrefix(c, "$JS.API.CONSUMER.") || strings.Contains(c, ".$O.media.M.") {
					t.Errorf("ReadHeadStatted made %q, want direct gets of chunks alone", calls)
					break
				}
			}

			// Tampered chunk data (same length) is refused by the digest of the Stat's version.
			last, err := stream.GetLastMsgForSubject(ctx, "$O.media.C.>")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, last.Subject, bytes.Repeat([]byte("y"), len(last.Data))); err != nil {
				t.Fatal(err)
			}
			if err := stream.DeleteMsg(ctx, last.Sequence); err != nil {
				t.Fatal(err)
			}
			if _, err := objstore.GetStatted(ctx, s, info, io.Discard); err == nil || !strings.Contains(err.Error(), "digest") {
				t.Errorf("GetStatted of tampered data: %v, want a digest error", err)
			}

			// Overwritten since the Stat: the old version's chunks are purged, so it reads what Get reads.
			newer := bytes.Repeat([]byte("n"), size/2)
			if err := s.Put(ctx, "media", key, bytes.NewReader(newer), int64(len(newer)), "text/plain"); err != nil {
				t.Fatal(err)
			}
			got.Reset()
			if n, err := objstore.GetStatted(ctx, s, info, &got); err != nil || !bytes.Equal(got.Bytes(), newer) {
				t.Errorf("GetStatted of an overwritten object = %d, %v (the newer bytes: %v)", n, err, bytes.Equal(got.Bytes(), newer))
			}

			// Deleted since the Stat: not found, as Get says.
			if err := s.Delete(ctx, "media", key); err != nil {
				t.Fatal(err)
			}
			if _, err := objstore.GetStatted(ctx, s, info, io.Discard); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("GetStatted of a deleted object = %v, want ErrNotFound", err)
			}
		})
	}
}
