package contracts

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const testID = "550e8400-e29b-41d4-a716-446655440000"

// requestJSON is a valid request with one field replaced by raw JSON (a quoted string, a number, ...).
func requestJSON(field, raw string) string {
	f := map[string]string{
		"s3Key": `"u1/photo.jpg"`, "s3Bucket": `"media"`, "mediaId": `"` + testID + `"`, "mediaUrl": `"https://api.example/m/1"`,
	}
	if field != "" {
		f[field] = raw
	}
	return `{"s3Key":` + f["s3Key"] + `,"s3Bucket":` + f["s3Bucket"] + `,"mediaId":` + f["mediaId"] + `,"mediaUrl":` + f["mediaUrl"] + `}`
}

// refusal parses doc, wants an answerable refusal, and checks that the failure response built from it
// passes both schemas and stays small whatever the payload held.
func refusal(t *testing.T, doc string) (Request, *ParseError) {
	t.Helper()
	req, err := ParseRequest([]byte(doc))
	var pe *ParseError
	if !errors.As(err, &pe) || !pe.Correlatable {
		t.Fatalf("got %v, want an answerable refusal", err)
	}
	// As pipeline.Refused answers it: the recipe too, when the request kept one.
	resp := Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Recipe: req.Recipe, Error: err.Error()}
	if err := Validate(SchemaResponse, resp); err != nil {
		t.Fatalf("the refusal's answer fails the schemas: %v", err)
	}
	if b, _ := json.Marshal(resp); len(b) > 8<<10 {
		t.Fatalf("the refusal's answer is %d bytes", len(b))
	}
	return req, pe
}

// TestBucketNamesFollowS3: a name S3 would refuse (with a 400, retried for ten minutes) is refused at
// once, with an answer; Go's rules and the published schema agree on every name.
func TestBucketNamesFollowS3(t *testing.T) {
	good := []string{"media", "abc", "my.bucket-1", "a1.b2.c3", "0ab", strings.Repeat("a", 63), "192.168.5.4a", "xn-ok"}
	bad := []string{"Media_Upper", "MEDIA", "my_bucket", "ab", "", strings.Repeat("a", 64), "-abc", "abc-", ".abc", "abc.",
		"a..b", "a.-b", "a-.b", ".", "..", "192.168.5.4", "xn--abc", "sthree-abc", "amzn-s3-demo-x", "abc-s3alias",
		"abc--ol-s3", "abc.mrap", "abc--x-s3", "abc--table-s3", "m/x", "a b", "ünï"}
	for _, b := range good {
		if err := ValidateBucket(b); err != nil {
			t.Errorf("ValidateBucket(%q) = %v, want nil", b, err)
		}
		if err := Validate(SchemaRequest, Request{S3Key: "k.jpg", S3Bucket: b, MediaID: testID, MediaURL: "https://a/1"}); err != nil {
			t.Errorf("the schema refuses bucket %q: %v", b, err)
		}
	}
	for _, b := range bad {
		if err := ValidateBucket(b); err == nil {
			t.Errorf("ValidateBucket(%q) = nil, want a refusal", b)
		}
		if err := Validate(SchemaRequest, Request{S3Key: "k.jpg", S3Bucket: b, MediaID: testID, MediaURL: "https://a/1"}); err == nil {
			t.Errorf("the schema accepts bucket %q", b)
		}
	}
	_, pe := refusal(t, requestJSON("s3Bucket", `"Media_Upper"`))
	if pe.Field != "s3Bucket" || !strings.Contains(pe.Reason, "lowercase") {
		t.Errorf("got %v", pe)
	}
}

// TestOversizedRequestsAreAnsweredSmall: each field has a limit and so has the payload; a request over
// one is answered (it names its mediaId) with a response that echoes none of the oversized text.
func TestOversizedRequestsAreAnsweredSmall(t *testing.T) {
	huge := strings.Repeat("x", 200<<10)
	cases := []struct {
		name, doc, field, reason, echo string
	}{
		{"padded payload", `{"pad":"` + huge + `",` + requestJSON("", "")[1:], "", "payload is 204938 bytes, limit is 65536", "https://api.example/m/1"},
		{"huge key", requestJSON("s3Key", `"`+huge[:60<<10]+`"`), "s3Key", "is 61440 bytes, limit is 1024", "https://api.example/m/1"},
		{"huge url", requestJSON("mediaUrl", `"https://api.example/`+strings.Repeat("p", 5000)+`"`), "mediaUrl", "is 5020 bytes, limit is 4096", "s3://media/u1/photo.jpg"},
		{"huge bucket", requestJSON("s3Bucket", `"`+strings.Repeat("b", 70)+`"`), "s3Bucket", "is 70 bytes", "https://api.example/m/1"},
		{"huge everything", `{"s3Key":"` + huge + `","s3Bucket":"` + huge + `","mediaId":"` + testID + `","mediaUrl":"https://` + huge + `"}`, "", "payload is", "urn:uuid:" + testID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, pe := refusal(t, tc.doc)
			if pe.Field != tc.field || !strings.Contains(pe.Error(), tc.reason) {
				t.Errorf("refused as field=%q %q; want field=%q containing %q", pe.Field, pe.Error(), tc.field, tc.reason)
			}
			if req.MediaURL != tc.echo {
				t.Errorf("echoes %.80q, want %q", req.MediaURL, tc.echo)
			}
			if len(req.S3Key) > MaxKeyBytes || len(req.S3Bucket) > MaxBucketBytes || len(req.MediaURL) > MaxMediaURLBytes {
				t.Errorf("returned fields of %d, %d, %d bytes: over their limits", len(req.S3Key), len(req.S3Bucket), len(req.MediaURL))
			}
		})
	}
	// At the limits, accepted.
	long := requestJSON("mediaUrl", `"https://a.example/`+strings.Repeat("p", MaxMediaURLBytes-len("https://a.example/"))+`"`)
	if _, err := ParseRequest([]byte(long)); err != nil {
		t.Errorf("a mediaUrl of exactly %d bytes: %v", MaxMediaURLBytes, err)
	}
}

// TestInvalidTextIsRefused: encoding/json turns invalid UTF-8 and unpaired surrogate escapes into U+FFFD
// without a word; the worker then looked up a key nobody uploaded and answered "not found".
func TestInvalidTextIsRefused(t *testing.T) {
	cases := []struct {
		name, doc, field, reason string
		correlatable             bool
	}{
		{"invalid UTF-8 in s3Key", requestJSON("s3Key", "\"u1/\xff\xfe.jpg\""), "s3Key", "is not valid UTF-8", true},
		{"lone high surrogate in s3Key", requestJSON("s3Key", `"u1/\ud800.jpg"`), "s3Key", "unpaired UTF-16 surrogate", true},
		{"lone low surrogate in s3Key", requestJSON("s3Key", `"u1/\uDC00.jpg"`), "s3Key", "unpaired UTF-16 surrogate", true},
		{"high surrogate at the end", requestJSON("s3Key", `"u1/x\ud83d"`), "s3Key", "unpaired UTF-16 surrogate", true},
		{"two high surrogates", requestJSON("s3Key", `"\ud83d\ud83d.jpg"`), "s3Key", "unpaired UTF-16 surrogate", true},
		{"invalid UTF-8 in mediaUrl", requestJSON("mediaUrl", "\"https://a/\xc3\""), "mediaUrl", "is not valid UTF-8", true},
		{"invalid UTF-8 in bucket", requestJSON("s3Bucket", "\"med\xe9a\""), "s3Bucket", "is not valid UTF-8", true},
		{"invalid UTF-8 elsewhere", `{"note":"caf` + "\xe9" + `",` + requestJSON("", "")[1:], "", "payload is not valid UTF-8 (at byte 12)", true},
		{"invalid UTF-8 in mediaId", requestJSON("mediaId", "\"550e8400-e29b-41d4-a716-44665544000\xff\""), "mediaId", "is not valid UTF-8", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(tc.doc))
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Field != tc.field || !strings.Contains(pe.Error(), tc.reason) || pe.Correlatable != tc.correlatable {
				t.Fatalf("got %#v; want field=%q correlatable=%v containing %q", err, tc.field, tc.correlatable, tc.reason)
			}
			if strings.ContainsRune(req.S3Key+req.S3Bucket+req.MediaURL, '\uFFFD') {
				t.Errorf("returned a replaced field: %+v", req)
			}
		})
	}
	// A pair is one character, and an escaped U+FFFD is what it says.
	for _, key := range []string{`"u1/\ud83d\ude00.jpg"`, `"u1/\uFFFD.jpg"`, `"u1/\\ud800.jpg"`, "\"u1/\u00e9t\u00e9.jpg\""} {
		if _, err := ParseRequest([]byte(requestJSON("s3Key", key))); err != nil {
			t.Errorf("key %s refused: %v", key, err)
		}
	}
}

// TestTrailingDataIsAnswered: a second value after the request went to the dead-letter stream
// unanswered although the request named its mediaId.
func TestTrailingDataIsAnswered(t *testing.T) {
	valid := requestJSON("", "")
	for _, tail := range []string{"garbage", `{"s3Key":"other.jpg"}`, "}", "]", " \n 1", "\x00"} {
		_, pe := refusal(t, valid+tail)
		if pe.Field != "" || !strings.Contains(pe.Reason, "trailing data") {
			t.Errorf("%q: got %v", tail, pe)
		}
	}
	if _, err := ParseRequest([]byte(valid + " \r\n\t")); err != nil {
		t.Errorf("trailing whitespace refused: %v", err)
	}
}

// TestMediaURLSchemes: mediaUrl is echoed to the API as originalUrl, so only the schemes of web and
// store URLs get in; a refused one is never echoed.
func TestMediaURLSchemes(t *testing.T) {
	for _, u := range []string{"https://api.example/m/1", "http://a.example", "HTTPS://A.example/x", "s3://media/u1/a.jpg",
		"nats://objectstore/media/u1/a.jpg", "https://[::1]:8080/m", "https://api.example/m/a%20b?x=1#f"} {
		if _, err := ParseRequest([]byte(requestJSON("mediaUrl", `"`+u+`"`))); err != nil {
			t.Errorf("%q refused: %v", u, err)
		}
	}
	for _, u := range []string{"javascript:alert(1)", "JavaScript://x/%0aalert(1)", "data:text/html,<script>x</script>",
		"file:///etc/passwd", "ftp://a.example/x", "vbscript:x", "https:opaque", "https:///no-host", "urn:uuid:" + testID,
		"https://[fe80::1%25en0]/x", "//a.example/x"} {
		t.Run(u, func(t *testing.T) {
			req, pe := refusal(t, requestJSON("mediaUrl", `"`+u+`"`))
			if pe.Field != "mediaUrl" {
				t.Errorf("refused as %v", pe)
			}
			if req.MediaURL != "s3://media/u1/photo.jpg" {
				t.Errorf("echoes %q, want the upload's own URI", req.MediaURL)
			}
			if err := Validate(SchemaRequest, Request{S3Key: "k.jpg", S3Bucket: "media", MediaID: testID, MediaURL: u}); err == nil {
				t.Errorf("the schema accepts mediaUrl %q", u)
			}
		})
	}
}
