package objstore_test

import (
	"bytes"
	"testing"

	"github.com/mediaworker/mediaworker/objstore"
)

// TestGetRangeWithoutRangeGetter: a store that can only read from the start gives the right bytes of a
// range, and the read stops once the range is written instead of running to the end; a store whose
// object ends before the range does is an error.
func TestGetRangeWithoutRangeGetter(t *testing.T) {
	body := make([]byte, 10000)
	for i := range body {
		body[i] = byte(i * 7)
	}
	s := &scriptedStore{info: objstore.Info{Bucket: "b", Key: "k", Size: int64(len(body))}, body: body}
	for _, r := range [][2]int64{{0, 1}, {150, 1000}, {9999, 1}, {0, 10000}, {123, 0}} {
		var got bytes.Buffer
		s.written = 0
		n, err := objstore.GetRange(t.Context(), s, s.info, r[0], r[1], &got)
		if err != nil || n != r[1] || !bytes.Equal(got.Bytes(), body[r[0]:r[0]+r[1]]) {
			t.Errorf("GetRange(%d, %d) = %d, %v, %d bytes", r[0], r[1], n, err, got.Len())
		}
		if s.written > r[0]+r[1]+100 {
			t.Errorf("GetRange(%d, %d) read %d bytes of the object; it should stop after the range", r[0], r[1], s.written)
		}
	}
	short := &scriptedStore{info: objstore.Info{Bucket: "b", Key: "k", Size: 20000}, body: body}
	if n, err := objstore.GetRange(t.Context(), short, short.info, 9000, 2000, &bytes.Buffer{}); err == nil {
		t.Errorf("GetRange past the end of what the store sent = %d, nil; want an error", n)
	}
	if _, err := objstore.GetRange(t.Context(), s, s.info, 9000, 2000, &bytes.Buffer{}); err == nil {
		t.Error("GetRange outside the object's size succeeded")
	}
}
