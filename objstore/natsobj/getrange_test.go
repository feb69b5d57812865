package natsobj_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// TestGetRangeReadsOnlyItsChunks: a range near the end of a large object costs the chunks that hold
// it, not the object up to there. Measured in bytes the server sent the store's connection (its NATS
// statistics), never in time: the last 10 bytes of a 4 MiB object, a small range in its middle and a
// range over 18 chunks each cost at most the chunks they touch plus the last chunk and one probe,
// and no consumer is created.
func TestGetRangeReadsOnlyItsChunks(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	const chunk = 128 << 10
	const size = 32*chunk + 1000 // 33 chunks
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*31 + i>>9)
	}
	if err := s.Put(ctx, "media", "big.mp4", bytes.NewReader(data), size, "video/mp4"); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(ctx, "media", "big.mp4")
	if err != nil {
		t.Fatal(err)
	}
	api := watchAPI(t, js)
	nc := js.Conn()
	for _, r := range []struct {
		off, n  int64
		touched int64 // chunks holding the range
	}{
		{size - 10, 10, 1},
		{20*chunk + 100, 1000, 1},
		{5*chunk + 7, 17 * chunk, 18},
		{size - chunk - 5, 10, 2},
	} {
		before := nc.Stats().InBytes
		var got bytes.Buffer
		n, err := s.GetRange(ctx, info, r.off, r.n, &got)
		read := nc.Stats().InBytes - before
		if err != nil || n != r.n || !bytes.Equal(got.Bytes(), data[r.off:r.off+r.n]) {
			t.Fatalf("GetRange(%d, %d) = %d, %v (equal: %v)", r.off, r.n, n, err, bytes.Equal(got.Bytes(), data[r.off:r.off+r.n]))
		}
		// The touched chunks, the last chunk, one probe, and headers.
		if limit := uint64(r.touched+2)*chunk + 16<<10; read > limit {
			t.Errorf("GetRange(%d, %d) read %d bytes from the server, want at most %d (%d chunks): it read what comes before the range",
				r.off, r.n, read, limit, r.touched+2)
		}
		t.Logf("GetRange(%d, %d): %d bytes from the server", r.off, r.n, read)
	}
	for _, call := range api.take(t) {
		if strings.Contains(call, "CONSUMER") {
			t.Errorf("a range read made %s; it needs no consumer", call)
		}
	}
}

// TestGetRangeFindsInterleavedChunks: an object whose chunks lie among other objects' (uploads to one
// bucket side by side), with a long run of foreign messages in its middle, is read right at every
// chunk: the binary search over sequences finds each one.
func TestGetRangeFindsInterleavedChunks(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	const cs, count = 1000, 40
	var chunks [][]byte
	for i := range count {
		n := cs
		if i == count-1 {
			n = 321
		}
		chunks = append(chunks, bytes.Repeat([]byte{byte(i)}, n))
		for j := range n {
			chunks[i][j] += byte(j)
		}
	}
	foreign := func(i int) int {
		if i == count/2 {
			return 300
		}
		return (i * 7) % 5
	}
	data := putRawObject(t, js, "media", "mixed.mp4", cs, chunks, foreign)
	info, err := s.Stat(ctx, "media", "mixed.mp4")
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	ranges := [][2]int64{{0, 10}, {size - 1, 1}, {3, size - 6}, {2*cs + 500, 18 * cs}, {cs*count/2 - 5, 10}}
	for k := range int64(count) {
		ranges = append(ranges, [2]int64{k*cs + 3, 10}, [2]int64{k * cs, min(cs, size-k*cs)})
	}
	for _, r := range ranges {
		var got bytes.Buffer
		n, err := s.GetRange(ctx, info, r[0], r[1], &got)
		if err != nil || n != r[1] || !bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]) {
			t.Errorf("GetRange(%d, %d) = %d, %v (equal: %v)", r[0], r[1], n, err, bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]))
		}
	}
}

// TestGetRangeShortChunks: nats.go's ObjectStore.Put stores each Read as it came, so a chunk may be
// short and offsets no longer follow from indexes. Such objects are still read right (from their
// start): one written by nats.go from a reader of small reads, and one built with the same number of
// chunks as full ones would take, but a short one first.
func TestGetRangeShortChunks(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	obs, err := js.ObjectStore(ctx, "media")
	if err != nil {
		t.Fatal(err)
	}
	small := make([]byte, 300<<10)
	for i := range small {
		small[i] = byte(i * 13)
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "small-reads.bin"}, &smallReads{r: bytes.NewReader(small), max: 1000}); err != nil {
		t.Fatal(err)
	}
	built := putRawObject(t, js, "media", "short-first.bin", 1000,
		[][]byte{bytes.Repeat([]byte("a"), 500), bytes.Repeat([]byte("b"), 1000), bytes.Repeat([]byte("c"), 700)}, nil)
	for key, data := range map[string][]byte{"small-reads.bin": small, "short-first.bin": built} {
		info, err := s.Stat(ctx, "media", key)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(len(data))
		for _, r := range [][2]int64{{size - 10, 10}, {600, 1000}, {1, size - 2}} {
			var got bytes.Buffer
			n, err := s.GetRange(ctx, info, r[0], r[1], &got)
			if err != nil || n != r[1] || !bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]) {
				t.Errorf("%s: GetRange(%d, %d) = %d, %v (equal: %v)", key, r[0], r[1], n, err, bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]))
			}
		}
	}
}

// TestGetRangeOfAnOverwrittenVersion: a version overwritten since the Stat is gone; its range is read
// from the current version, as GetStatted does.
func TestGetRangeOfAnOverwrittenVersion(t *testing.T) {
	_, s := mediaStore(t)
	ctx := t.Context()
	const size = 300 << 10
	put := func(b byte) []byte {
		data := bytes.Repeat([]byte{b}, size)
		if err := s.Put(ctx, "media", "v.mp4", bytes.NewReader(data), size, "video/mp4"); err != nil {
			t.Fatal(err)
		}
		return data
	}
	put('1')
	info, err := s.Stat(ctx, "media", "v.mp4")
	if err != nil {
		t.Fatal(err)
	}
	now := put('2')
	var got bytes.Buffer
	if n, err := s.GetRange(ctx, info, 200<<10, 100, &got); err != nil || n != 100 || !bytes.Equal(got.Bytes(), now[:100]) {
		t.Errorf("GetRange of an overwritten version = %d, %v, %q", n, err, got.Bytes())
	}
}

// putRawObject writes an object in the object-store layout (NATS ADR-20) by hand: chunks of the given
// sizes on its chunk subject, foreign(i) messages of another object after chunk i (nil: none), then
// its metadata with chunk size cs. It returns the object's bytes.
func putRawObject(t *testing.T, js jetstream.JetStream, bucket, name string, cs int, chunks [][]byte, foreign func(int) int) []byte {
	t.Helper()
	ctx := t.Context()
	id, other := nuid.Next(), nuid.Next()
	var data []byte
	for i, c := range chunks {
		if _, err := js.Publish(ctx, fmt.Sprintf("$O.%s.C.%s", bucket, id), c); err != nil {
			t.Fatal(err)
		}
		data = append(data, c...)
		for j := 0; foreign != nil && j < foreign(i); j++ {
			if _, err := js.Publish(ctx, fmt.Sprintf("$O.%s.C.%s", bucket, other), bytes.Repeat([]byte("z"), cs)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sum := sha256.Sum256(data)
	meta, err := json.Marshal(jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(cs)}},
		Bucket:     bucket, NUID: id, Size: uint64(len(data)), Chunks: uint32(len(chunks)),
		Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]),
	})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(fmt.Sprintf("$O.%s.M.%s", bucket, base64.URLEncoding.EncodeToString([]byte(name))))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data = meta
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	return data
}

// smallReads returns at most max bytes per Read.
type smallReads struct {
	r   io.Reader
	max int
}

func (s *smallReads) Read(p []byte) (int, error) {
	return s.r.Read(p[:min(len(p), s.max)])
}
