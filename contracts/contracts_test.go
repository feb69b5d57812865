package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The golden files are the examples of the contract document (seeds/001); the video example's "{mediaId}"
// placeholder is filled in and the virus example's placeholders ("uuid", "ISO-8601") are given real values.
func TestGoldenExamples(t *testing.T) {
	cases := []struct {
		file   string
		schema string
		into   any
	}{
		{"request.json", SchemaRequest, &Request{}},
		{"response-image-success.json", SchemaResponse, &Response{}},
		{"response-video-success.json", SchemaResponse, &Response{}},
		{"response-failure.json", SchemaResponse, &Response{}},
		{"virus-event.json", SchemaVirusEvent, &VirusEvent{}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateJSON(tc.schema, raw); err != nil {
				t.Fatalf("golden document does not validate: %v", err)
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(tc.into); err != nil {
				t.Fatalf("decoding into %T: %v", tc.into, err)
			}
			// Round trip: our encoding must carry exactly the document's content.
			again, err := json.Marshal(tc.into)
			if err != nil {
				t.Fatal(err)
			}
			var want, got any
			_ = json.Unmarshal(raw, &want)
			_ = json.Unmarshal(again, &got)
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("round trip changed the document:\nwant %s\ngot  %s", raw, again)
			}
		})
	}
}

func TestSchemasRejectWhatTheContractForbids(t *testing.T) {
	bad := []struct {
		name, schema, doc string
	}{
		{"failure without error", SchemaResponse, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","originalUrl":"https://a/b","success":false}`},
		{"success without processed", SchemaResponse, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","originalUrl":"https://a/b","success":true}`},
		{"success with error", SchemaResponse, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","originalUrl":"https://a/b","success":true,"processed":[],"error":"x"}`},
		{"unknown quality", SchemaResponse, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","originalUrl":"https://a/b","success":true,"processed":[{"quality":"huge","format":"webp","url":"https://a/b","size":1}]}`},
		{"relative variant url", SchemaResponse, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","originalUrl":"https://a/b","success":true,"processed":[{"quality":"high","format":"webp","url":"not a uri","size":1}]}`},
		{"negative size", SchemaResponse, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","originalUrl":"https://a/b","success":true,"processed":[{"quality":"high","format":"webp","url":"https://a/b","size":-1}]}`},
		{"request without key", SchemaRequest, `{"s3Bucket":"bkt","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/b"}`},
		{"request with bad uuid", SchemaRequest, `{"s3Key":"k","s3Bucket":"bkt","mediaId":"nope","mediaUrl":"https://a/b"}`},
		{"virus with bad time", SchemaVirusEvent, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","s3Key":"k","s3Bucket":"bkt","mediaUrl":"u","virusName":"v","detectedAt":"yesterday","actionTaken":"quarantined"}`},
		{"virus with unknown action", SchemaVirusEvent, `{"mediaId":"550e8400-e29b-41d4-a716-446655440000","s3Key":"k","s3Bucket":"bkt","mediaUrl":"u","virusName":"v","detectedAt":"2026-01-01T00:00:00Z","actionTaken":"ignored"}`},
	}
	for _, tc := range bad {
		if err := ValidateJSON(tc.schema, []byte(tc.doc)); err == nil {
			t.Errorf("%s: schema accepted %s", tc.name, tc.doc)
		}
	}
}

func TestParseRequestNamesTheField(t *testing.T) {
	const good = `{"s3Key":"u1/photo.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://api.example/m/1"}`
	if _, err := ParseRequest([]byte(good)); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
	cases := []struct {
		name, doc, field, reason string
		correlatable             bool
	}{
		{"missing key", `{"s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`, "s3Key", "is missing", true},
		{"empty bucket", `{"s3Key":"a.jpg","s3Bucket":"","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`, "s3Bucket", "is empty", true},
		{"missing url", `{"s3Key":"a.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000"}`, "mediaUrl", "is missing", true},
		{"relative url", `{"s3Key":"a.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"media/1"}`, "mediaUrl", "absolute URI", true},
		{"not a uuid", `{"s3Key":"a.jpg","s3Bucket":"media","mediaId":"1234","mediaUrl":"https://a/1"}`, "mediaId", "must be a UUID", false},
		{"number id", `{"s3Key":"a.jpg","s3Bucket":"media","mediaId":42,"mediaUrl":"https://a/1"}`, "mediaId", "must be a string, got a number", false},
		{"missing id", `{"s3Key":"a.jpg","s3Bucket":"media","mediaUrl":"https://a/1"}`, "mediaId", "is missing", false},
		{"dotdot key", `{"s3Key":"u1/../etc/passwd","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`, "s3Key", `".." path segment`, true},
		{"absolute key", `{"s3Key":"/etc/passwd","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`, "s3Key", "must not start with '/'", true},
		{"nul key", `{"s3Key":"a\u0000.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`, "s3Key", "control character U+0000", true},
		{"long key", `{"s3Key":"` + strings.Repeat("a", 2000) + `","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`, "s3Key", "is 2000 bytes, limit is 1024", true},
		{"bucket with slash", `{"s3Key":"a.jpg","s3Bucket":"m/x","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`, "s3Bucket", "has character '/'", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tc.doc))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ParseError, got %v", err)
			}
			if pe.Field != tc.field || !strings.Contains(pe.Error(), tc.reason) || pe.Correlatable != tc.correlatable {
				t.Fatalf("got field=%q correlatable=%v %q; want field=%q correlatable=%v containing %q",
					pe.Field, pe.Correlatable, pe.Error(), tc.field, tc.correlatable, tc.reason)
			}
		})
	}
	for _, junk := range []string{``, `nope`, `[]`, `null`, `"s"`, `{"a":1} {}`, `{`} {
		_, err := ParseRequest([]byte(junk))
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Correlatable || pe.Field != "" {
			t.Errorf("%q: want an uncorrelatable payload error, got %#v", junk, err)
		}
	}
}

func TestOutputKeys(t *testing.T) {
	id := "550e8400-e29b-41d4-a716-446655440000"
	k := KeysFor(Request{S3Key: "u1/photo.jpg", MediaID: id})
	want := map[string]string{
		k.Image(QualityHigh): "u1/images/" + id + "/photo_high.webp",
		k.Video():            "u1/videos/" + id + "/mp4/photo.mp4",
		k.Poster():           "u1/thumbnail/" + id + "/poster.jpg",
		k.HLS("index.m3u8"):  "u1/videos/" + id + "/hls/index.m3u8",
	}
	for got, w := range want {
		if got != w {
			t.Errorf("got %q want %q", got, w)
		}
	}
	root := KeysFor(Request{S3Key: "clip.tar.mov", MediaID: id})
	if got := root.Video(); got != "videos/"+id+"/mp4/clip.tar.mp4" {
		t.Errorf("root key: got %q", got)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"s3Key":"u1/photo.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`))
	f.Add([]byte(`{"s3Key":"../x","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}`))
	f.Add([]byte(`{"mediaId":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"s3Key":"a.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"}}`))
	f.Add([]byte("{\"s3Key\":\"a\xff.jpg\",\"s3Bucket\":\"media\",\"mediaId\":\"550e8400-e29b-41d4-a716-446655440000\",\"mediaUrl\":\"https://a/1\"}"))
	f.Add([]byte(`{"s3Key":"a\ud800.jpg","s3Bucket":"Media_Upper","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"javascript:alert(1)"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := ParseRequest(data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error is not a *ParseError: %v", err)
			}
			if pe.Correlatable {
				// The answer to a refusal passes both schemas and echoes nothing oversized.
				resp := Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Error: err.Error()}
				if err := Validate(SchemaResponse, resp); err != nil {
					t.Fatalf("refusal's answer fails the schemas: %v", err)
				}
				if b, _ := json.Marshal(resp); len(b) > 16<<10 {
					t.Fatalf("refusal's answer is %d bytes", len(b))
				}
			}
			return
		}
		// Anything accepted must satisfy the published schema and yield keys that stay in its directory.
		if err := Validate(SchemaRequest, req); err != nil {
			t.Fatalf("accepted request fails the schema: %v", err)
		}
		k := KeysFor(req)
		for _, out := range []string{k.Image(QualityLow), k.Video(), k.Poster(), k.HLS("index.m3u8")} {
			if out == req.S3Key {
				t.Fatalf("output key equals input key %q", out)
			}
			if ValidateKey(out) != nil {
				t.Fatalf("derived key %q is not a valid key", out)
			}
			if k.Dir() != "" && !strings.HasPrefix(out, k.Dir()+"/") {
				t.Fatalf("derived key %q leaves directory %q", out, k.Dir())
			}
		}
	})
}

func TestSubjectsWildcardCoversEverySubject(t *testing.T) {
	s := SubjectsFor("shop")
	if w := s.Wildcard(); w != "shop.media.optimize.>" {
		t.Fatalf("Wildcard() = %q", w)
	}
	for _, subj := range []string{s.Request, s.Response, s.Virus, s.DLQ, s.ProgressSubject("x")} {
		if !strings.HasPrefix(subj, "shop.media.optimize.") || subj == "shop.media.optimize." {
			t.Errorf("%q is not under the wildcard", subj)
		}
	}
}
