package contracts

import (
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
)

// checkOutputKeys asserts everything a request's output keys promise: each is a valid key of at most
// MaxKeyBytes, in canonical form, under the request key's directory in a subtree named after the
// mediaId, different from the request key and from every other output.
func checkOutputKeys(t *testing.T, req Request) {
	t.Helper()
	k := KeysFor(req)
	prefix := ""
	if k.Dir() != "" {
		prefix = k.Dir() + "/"
	}
	outs := []string{
		k.Image(QualityHigh), k.Image(QualityMedium), k.Image(QualityLow), k.Video(), k.Poster(),
		k.HLS("index.m3u8"), k.HLS("seg_000.ts"), k.HLS("seg_99999.ts"),
	}
	seen := map[string]bool{}
	longest := 0
	for _, out := range outs {
		switch {
		case out == req.S3Key:
			t.Fatalf("output key equals the request key %q", out)
		case seen[out]:
			t.Fatalf("two outputs share the key %q", out)
		case ValidateKey(out) != nil:
			t.Fatalf("output key %q is not a valid key: %v", out, ValidateKey(out))
		case len(out) > MaxKeyBytes:
			t.Fatalf("output key is %d bytes, over %d", len(out), MaxKeyBytes)
		case path.Clean(out) != out:
			t.Fatalf("output key %q is not in canonical form (%q)", out, path.Clean(out))
		case !strings.HasPrefix(out, prefix):
			t.Fatalf("output key %q leaves the request's directory %q", out, k.Dir())
		}
		rest := strings.TrimPrefix(out, prefix)
		top, sub, _ := strings.Cut(rest, "/")
		if (top != "images" && top != "videos" && top != "thumbnail") || !strings.HasPrefix(sub, req.MediaID+"/") {
			t.Fatalf("output key %q is not under <dir>/{images,videos,thumbnail}/<mediaId>/", out)
		}
		seen[out] = true
		longest = max(longest, len(out))
	}
	if longest > k.Longest() {
		t.Fatalf("an output key is %d bytes, Longest says %d", longest, k.Longest())
	}
}

func TestOutputKeysStayInTheirDirectory(t *testing.T) {
	id := "550e8400-e29b-41d4-a716-446655440000"
	for _, key := range []string{
		"photo.jpg", ".jpg", "a/b/c/d.e.f", "ünï/ß.png", "u/images/" + id + "/p_high.webp",
		"x/videos/" + id + "/mp4/x.mp4", "dir.with.dots/file", "u/photo.jpg[shrink=8]",
	} {
		req := Request{S3Key: key, MediaID: id}
		if err := ValidateKey(key); err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		checkOutputKeys(t, req)
	}
}

// TestLongKeysLeaveRoomForOutputs: a key that is valid on its own but whose outputs would exceed
// MaxKeyBytes is refused when the request is validated, and says by how much to shorten it.
func TestLongKeysLeaveRoomForOutputs(t *testing.T) {
	id := "550e8400-e29b-41d4-a716-446655440000"
	req := Request{MediaID: id, MediaURL: "https://a/1", S3Bucket: "media"}
	req.S3Key = strings.Repeat("d", 900) + "/photo.jpg"
	if err := req.Validate(); err != nil {
		t.Fatalf("a 910-byte key was refused: %v", err)
	}
	req.S3Key = strings.Repeat("d", 1000) + "/p.jpg"
	err := req.Validate()
	if err == nil || !strings.Contains(err.Error(), "s3Key is 1006 bytes: the output keys derived from it would be up to 1065 bytes, limit is 1024 (shorten the key by 41 bytes)") {
		t.Fatalf("got %v", err)
	}
}

// FuzzOutputKeys derives output keys from arbitrary request keys and mediaIds: whenever the request
// is valid, every output key must keep the promises of checkOutputKeys.
func FuzzOutputKeys(f *testing.F) {
	id := uuid.MustParse("550e8400-e29b-41d4-a716-446655440000")
	for _, key := range []string{
		"u1/photo.jpg", "clip.tar.mov", ".jpg", "a/b/c/d.e.f", "ünï/ß.png", "../x", "/abs", "a//b", "a/./b",
		"u/images/550e8400-e29b-41d4-a716-446655440000/p_high.webp", "x\x00.jpg", "dir/", ".", "..",
		strings.Repeat("k", 970) + ".jpg", strings.Repeat("k/", 480) + "x",
	} {
		f.Add(key, id[:])
	}
	f.Fuzz(func(t *testing.T, key string, idBytes []byte) {
		var raw [16]byte
		copy(raw[:], idBytes)
		req := Request{S3Key: key, MediaID: uuid.UUID(raw).String(), MediaURL: "https://a/1", S3Bucket: "media"}
		keyErr := ValidateKey(key)
		if err := req.Validate(); err != nil {
			if keyErr == nil && !strings.Contains(err.Error(), "output keys derived from it") {
				t.Fatalf("valid key %q refused for another reason: %v", key, err)
			}
			return
		}
		if keyErr != nil {
			t.Fatalf("Validate accepted key %q that ValidateKey refuses: %v", key, keyErr)
		}
		if !utf8.ValidString(key) || len(key) > MaxKeyBytes {
			t.Fatalf("accepted key %q is invalid UTF-8 or too long", key)
		}
		checkOutputKeys(t, req)
	})
}
