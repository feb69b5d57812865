package contracts

import (
	"strings"
	"testing"
)

// Documents the seed contract's schemas reject must be rejected by ours too (the reverse does not
// hold: ours are stricter). Our own schema is checked alone here (validateOne), not through
// ValidateJSON, which would let the seed's schema do the rejecting.
func TestOurSchemasRejectWhatTheSeedRejects(t *testing.T) {
	const id = `"mediaId":"550e8400-e29b-41d4-a716-446655440000"`
	cases := []struct{ name, schema, doc string }{
		{"empty originalUrl", SchemaResponse, `{` + id + `,"originalUrl":"","success":false,"error":"x"}`},
		{"relative originalUrl", SchemaResponse, `{` + id + `,"originalUrl":"media/1","success":false,"error":"x"}`},
		{"non-uuid mediaId", SchemaResponse, `{"mediaId":"1234","originalUrl":"https://a/b","success":false,"error":"x"}`},
		{"missing originalUrl", SchemaResponse, `{` + id + `,"success":false,"error":"x"}`},
		{"string success", SchemaResponse, `{` + id + `,"originalUrl":"https://a/b","success":"yes","error":"x"}`},
		{"variant without url", SchemaResponse, `{` + id + `,"originalUrl":"https://a/b","success":true,"processed":[{"quality":"high","format":"webp","size":1}]}`},
		{"unknown format", SchemaResponse, `{` + id + `,"originalUrl":"https://a/b","success":true,"processed":[{"quality":"high","format":"avif","url":"https://a/b","size":1}]}`},
		{"fractional size", SchemaResponse, `{` + id + `,"originalUrl":"https://a/b","success":true,"processed":[{"quality":"high","format":"webp","url":"https://a/b","size":1.5}]}`},
		{"request with relative url", SchemaRequest, `{"s3Key":"k","s3Bucket":"bkt",` + id + `,"mediaUrl":"media/1"}`},
		{"request with numeric key", SchemaRequest, `{"s3Key":1,"s3Bucket":"bkt",` + id + `,"mediaUrl":"https://a/1"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateOne(seedSchemas[tc.schema], []byte(tc.doc)); err == nil {
				t.Fatalf("control: the seed's schema accepts %s", tc.doc)
			}
			if err := validateOne(tc.schema, []byte(tc.doc)); err == nil {
				t.Errorf("our %s accepts what the seed's rejects: %s", tc.schema, tc.doc)
			}
			if err := ValidateJSON(tc.schema, []byte(tc.doc)); err == nil {
				t.Errorf("ValidateJSON accepts %s", tc.doc)
			}
		})
	}
}

// A refused request is answered with a URI as originalUrl even when its mediaUrl is what is wrong;
// one without a UUID mediaId is not answered at all (nobody to answer: the dead-letter stream).
func TestRefusalsEchoAURI(t *testing.T) {
	const id = "550e8400-e29b-41d4-a716-446655440000"
	cases := []struct{ name, doc, want string }{
		{"missing mediaUrl", `{"s3Key":"u1/my photo.jpg","s3Bucket":"media","mediaId":"` + id + `"}`, "s3://media/u1/my%20photo.jpg"},
		{"relative mediaUrl", `{"s3Key":"u1/a.jpg","s3Bucket":"media","mediaId":"` + id + `","mediaUrl":"media/1"}`, "s3://media/u1/a.jpg"},
		{"nothing usable", `{"s3Key":"../x","mediaId":"` + id + `"}`, "urn:uuid:" + id},
		{"bad key, good url", `{"s3Key":"../x","s3Bucket":"media","mediaId":"` + id + `","mediaUrl":"https://api.example/m/1"}`, "https://api.example/m/1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(tc.doc))
			pe, ok := err.(*ParseError)
			if !ok || !pe.Correlatable {
				t.Fatalf("got %v, want a correlatable refusal", err)
			}
			if req.MediaURL != tc.want {
				t.Fatalf("echoes %q, want %q", req.MediaURL, tc.want)
			}
			// The failure response the worker publishes from it passes both schemas.
			resp := Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Error: err.Error()}
			if err := Validate(SchemaResponse, resp); err != nil {
				t.Fatal(err)
			}
		})
	}
	_, err := ParseRequest([]byte(`{"s3Key":"a.jpg","s3Bucket":"media","mediaId":"1234","mediaUrl":"https://a/1"}`))
	if pe, ok := err.(*ParseError); !ok || pe.Correlatable || !strings.Contains(pe.Error(), "must be a UUID") {
		t.Errorf("non-UUID mediaId: got %v, want an uncorrelatable refusal", err)
	}
}

func TestHDRMetadataInTheSchema(t *testing.T) {
	base := Response{MediaID: "550e8400-e29b-41d4-a716-446655440000", OriginalURL: "https://a/b", Success: true,
		Processed: []Variant{{Quality: QualityOriginal, Format: FormatMP4, URL: "https://a/v.mp4", Size: 1, Width: 180, Height: 320},
			{Quality: QualityThumbnail, Format: FormatJPG, URL: "https://a/p.jpg", Size: 1, Width: 180, Height: 320}}}
	for _, hdr := range []string{"hlg", "pq"} {
		r := base
		r.Metadata = &Metadata{MIME: "video/quicktime", HDR: hdr}
		if err := Validate(SchemaResponse, r); err != nil {
			t.Errorf("hdr %q: %v", hdr, err)
		}
	}
	r := base
	r.Metadata = &Metadata{HDR: "dolby"}
	if err := Validate(SchemaResponse, r); err == nil {
		t.Error(`hdr "dolby" accepted`)
	}
}
