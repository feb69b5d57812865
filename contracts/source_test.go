package contracts

import (
	"encoding/json"
	"testing"
)

// An ingest-made request's source is read and kept; anything else under the name is ignored as the
// unknown field it was before the extension, never a refusal.
func TestRequestSource(t *testing.T) {
	const base = `{"s3Key":"in/a.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"s3://media/in/a.jpg"`
	good := `{"kind":"s3-event","event":"s3:ObjectCreated:Put","bucket":"media","key":"in/a.jpg","etag":"abc","size":3,"time":"2026-11-28T00:00:00.000Z"}`
	cases := []struct {
		name, source string
		kept         bool
	}{
		{"ingest's", good, true},
		{"a client's string", `"mobile"`, false},
		{"unknown kind", `{"kind":"ftp","event":"x","bucket":"media","key":"a"}`, false},
		{"no key", `{"kind":"s3-event","event":"x","bucket":"media"}`, false},
		{"bad time", `{"kind":"s3-event","event":"x","bucket":"media","key":"a","time":"yesterday"}`, false},
		{"negative size", `{"kind":"s3-event","event":"x","bucket":"media","key":"a","size":-1}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := base + `,"source":` + tc.source + `}`
			req, err := ParseRequest([]byte(doc))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if (req.Source != nil) != tc.kept {
				t.Fatalf("source kept = %v, want %v", req.Source != nil, tc.kept)
			}
			if tc.kept {
				if err := ValidateJSON(SchemaRequest, []byte(doc)); err != nil {
					t.Fatalf("the request schema refuses an ingest-made request: %v", err)
				}
				resp := Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Success: false, Error: "x", Metadata: &Metadata{Source: req.Source}}
				b, _ := json.Marshal(resp)
				if err := ValidateJSON(SchemaResponse, b); err != nil {
					t.Fatalf("the response schema refuses metadata.source: %v\n%s", err, b)
				}
			}
		})
	}
}
