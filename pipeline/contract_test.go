package pipeline

import (
	"testing"

	"github.com/mediaworker/mediaworker/contracts"
)

// A request without a usable mediaUrl (a caller that skipped validation) is still answered with a URI
// as originalUrl: the object's own URL, in the form its variants' URLs take. fixture.run validates
// each response against our schema and the seed contract's.
func TestOriginalURLIsAlwaysAURI(t *testing.T) {
	for _, mediaURL := range []string{"", "not a uri"} {
		for _, tc := range []struct {
			name  string
			setup func(*fixture)
			kind  Kind
		}{
			{"success", func(*fixture) {}, Success},
			{"failure", func(f *fixture) { f.store.objs["media/u/p.jpg"] = []byte("%PDF-1.4\n%%EOF\n") }, Failed},
		} {
			t.Run(tc.name+"/"+mediaURL, func(t *testing.T) {
				f := newFixture(t)
				f.req.MediaURL = mediaURL
				tc.setup(f)
				out := f.run(t)
				if out.Kind != tc.kind {
					t.Fatalf("kind %s, want %s (%v)", out.Kind, tc.kind, out.Err)
				}
				if want := "https://store.example/media/u/p.jpg"; out.Response.OriginalURL != want {
					t.Errorf("originalUrl %q, want the object's URL %q", out.Response.OriginalURL, want)
				}
				if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
					t.Error(err)
				}
			})
		}
	}
	// A request that has one keeps it.
	f := newFixture(t)
	if out := f.run(t); out.Response.OriginalURL != "https://a/1" {
		t.Errorf("originalUrl %q, want the request's mediaUrl", out.Response.OriginalURL)
	}
}

// A refusal handed a request that kept an invalid recipe name (a caller that skipped ParseRequest)
// echoes none: response.schema.json allows only a name as recipe. A valid one is echoed.
func TestRefusalEchoesOnlyAValidRecipe(t *testing.T) {
	for recipe, want := range map[string]string{"../card": "", "card\x00": "", "<script>": "", "card": "card"} {
		req := contracts.Request{MediaID: "550e8400-e29b-41d4-a716-446655440000", MediaURL: "https://a/1", S3Bucket: "media", S3Key: "u/p.jpg", Recipe: recipe}
		out := Refused(req, &contracts.ParseError{Field: "recipe", Reason: "is bad", Correlatable: true})
		if out.Response.Recipe != want {
			t.Errorf("recipe %q: the answer echoes %q, want %q", recipe, out.Response.Recipe, want)
		}
		if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
			t.Errorf("recipe %q: %v", recipe, err)
		}
	}
}

// A success whose asset facts could not be computed says so: the contract promises them on every
// success (docs/contract.md, "Asset facts"). fakeImages computes none.
func TestMissingFactsAreWarned(t *testing.T) {
	f := newFixture(t)
	out := f.run(t)
	if out.Kind != Success {
		t.Fatalf("kind %s (%v), want success", out.Kind, out.Err)
	}
	if md := out.Response.Metadata; md == nil || md.ThumbHash != "" || len(md.SHA256) != 64 {
		t.Fatalf("metadata %+v, want the sha256 and no facts", md)
	}
	if w := out.Response.Warnings; len(w) != 1 || w[0] != noFactsWarning {
		t.Errorf("warnings %q, want %q", w, noFactsWarning)
	}
}
