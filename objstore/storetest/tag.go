package storetest

import (
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/objstore"
)

// testTag: a Put made under RecordingTag learns the Tag of the version it stored, the same Tag a Stat
// of that version reports; bytes of the same size stored over them (what the reuse memory must never
// hand out as the first) have another Tag. Also for an upload in several parts (s3's multipart).
func testTag(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	put := func(key string, body string) string {
		t.Helper()
		var tag string
		err := s.Put(objstore.RecordingTag(objstore.AsVariant(ctx(t)), &tag), b, key, strings.NewReader(body), int64(len(body)), "image/webp")
		if err != nil {
			t.Fatalf("Put %s: %v", key, err)
		}
		if tag == "" {
			t.Fatalf("Put %s under RecordingTag recorded no tag", key)
		}
		info, err := s.Stat(ctx(t), b, key)
		if err != nil {
			t.Fatalf("Stat %s: %v", key, err)
		}
		if info.Tag != tag {
			t.Fatalf("Stat %s: Tag %q, the Put recorded %q", key, info.Tag, tag)
		}
		return tag
	}
	first := put("v/a.webp", "picture one, flat red")
	second := put("v/a.webp", "picture two, flat red") // the same size
	if first == second {
		t.Errorf("two different versions of the same size have the same Tag %q", first)
	}
	big := strings.Repeat("0123456789abcdef", 7<<16) // 7 MiB: over s3's smallest part
	one := put("v/big.mp4", big)
	two := put("v/big.mp4", big[:len(big)-1]+"!")
	if one == two {
		t.Errorf("two different large versions have the same Tag %q", one)
	}

	// A Put that did not ask records nothing, and fails nothing.
	putString(t, s, b, "v/plain.txt", "no tag asked")
}
