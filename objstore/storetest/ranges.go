package storetest

import (
	"bytes"
	"io"
	"sync"
	"testing"

	"github.com/mediaworker/mediaworker/objstore"
)

// rangeChunk is the JetStream object store's chunk size: ranges are cut around its boundaries, where a
// backend that reads by chunk could go wrong. For S3 they are just offsets.
const rangeChunk = 128 << 10

// testGetRange: every backend reads a range of an object without reading what comes before it
// (objstore.RangeGetter), and returns exactly its bytes: at the start, across chunk boundaries, over
// more chunks than one batch, at the very end, empty; whether the Info comes from Stat or only names
// the object; also when two objects were uploaded side by side (in the JetStream object store their
// chunks interleave). A range beyond the object is an error that writes nothing.
func testGetRange(t *testing.T, s objstore.Store) {
	if _, ok := s.(objstore.RangeGetter); !ok {
		t.Fatalf("%T has no GetRange: /objects would read every range from the object's first byte", s)
	}
	b := newBucket(t, s)
	const size = 21*rangeChunk + 777
	keys := []string{"ranges/a.mp4", "ranges/b.mp4"}
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			if err := s.Put(ctx(t), b, key, payload(uint64(40+i), size), size, "video/mp4"); err != nil {
				t.Errorf("Put %s: %v", key, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, key := range keys {
		data, _ := io.ReadAll(payload(uint64(40+i), size))
		statted, err := s.Stat(ctx(t), b, key)
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		named := objstore.Info{Bucket: b, Key: key, Size: size}
		for _, r := range [][2]int64{
			{0, 1}, {0, 100}, {1, size - 1}, {size - 1, 1}, {size - 10, 10}, {rangeChunk - 1, 2},
			{rangeChunk, rangeChunk}, {3*rangeChunk + 5, 17*rangeChunk + 11}, {size - rangeChunk - 10, 20},
			{10 * rangeChunk, size - 10*rangeChunk}, {0, size}, {5, 0},
		} {
			for name, info := range map[string]objstore.Info{"statted": statted, "named": named} {
				var got bytes.Buffer
				n, err := s.(objstore.RangeGetter).GetRange(ctx(t), info, r[0], r[1], &got)
				if err != nil || n != r[1] || !bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]) {
					t.Errorf("%s GetRange(%s, %d, %d) = %d, %v; got %d bytes, equal: %v", name, key, r[0], r[1], n, err,
						got.Len(), bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]))
				}
				got.Reset()
				n, err = objstore.GetRange(ctx(t), s, info, r[0], r[1], &got)
				if err != nil || n != r[1] || !bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]) {
					t.Errorf("objstore.GetRange(%s %s, %d, %d) = %d, %v", name, key, r[0], r[1], n, err)
				}
			}
		}
		for _, r := range [][2]int64{{size, 1}, {size - 5, 6}, {-1, 2}, {0, -1}} {
			var got bytes.Buffer
			if n, err := objstore.GetRange(ctx(t), s, statted, r[0], r[1], &got); err == nil || n != 0 || got.Len() != 0 {
				t.Errorf("GetRange(%d, %d) outside %d bytes = %d, %v, wrote %d bytes; want an error", r[0], r[1], size, n, err, got.Len())
			}
		}
	}
	var got bytes.Buffer
	_, err := objstore.GetRange(ctx(t), s, objstore.Info{Bucket: b, Key: "ranges/missing", Size: 100}, 10, 10, &got)
	requireNotFound(t, "GetRange", err, "ranges/missing")
	if got.Len() != 0 {
		t.Errorf("GetRange of a missing object wrote %d bytes", got.Len())
	}
}
