package contracts

import (
	"strings"
	"testing"
)

func TestRequestRecipeField(t *testing.T) {
	const base = `{"s3Key":"u1/a.jpg","s3Bucket":"media","mediaId":"550e8400-e29b-41d4-a716-446655440000","mediaUrl":"https://a/1"`
	req, err := ParseRequest([]byte(base + `}`))
	if err != nil || req.Recipe != "" || req.RecipeName() != DefaultRecipe {
		t.Fatalf("no recipe: %+v %v, want the default", req, err)
	}
	req, err = ParseRequest([]byte(base + `,"recipe":"avatar"}`))
	if err != nil || req.RecipeName() != "avatar" {
		t.Fatalf("recipe avatar: %+v %v", req, err)
	}
	if err := ValidateJSON(SchemaRequest, []byte(base+`,"recipe":"avatar"}`)); err != nil {
		t.Fatalf("schema refuses a named recipe: %v", err)
	}
	for doc, want := range map[string]string{
		base + `,"recipe":7}`:                                 "recipe must be a string",
		base + `,"recipe":""}`:                                "recipe is empty",
		base + `,"recipe":"Avatar"}`:                          "recipe \"Avatar\" must be lowercase",
		base + `,"recipe":"../x"}`:                            "recipe \"../x\" must be lowercase",
		base + `,"recipe":"` + strings.Repeat("a", 33) + `"}`: "recipe is 33 bytes",
		// Issue 31: each was echoed in the refusal's answer, which then failed response.schema.json.
		base + `,"recipe":"../card"}`:                   "recipe \"../card\" must be lowercase",
		base + `,"recipe":"card\u0000"}`:                "recipe \"card\\x00\" must be lowercase",
		base + `,"recipe":"<script>alert(1)</script>"}`: "recipe \"<script>alert(1)</script>\" must be lowercase",
		// A recipe that passed is still echoed when another field is refused.
		strings.Replace(base, `"media"`, `"MEDIA"`, 1) + `,"recipe":"card"}`: "s3Bucket",
	} {
		// refusal checks the answer built from the refusal against the response schema.
		req, pe := refusal(t, doc)
		if err := error(pe); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an answered refusal containing %q", doc, err, want)
		}
		if ValidateName(req.Recipe) != nil && req.Recipe != "" {
			t.Errorf("%s: the refused request keeps recipe %q, which its answer would echo", doc, req.Recipe)
		}
		if pe.Field != "recipe" && req.Recipe != "card" {
			t.Errorf("%s: the refused request lost its valid recipe (%q)", doc, req.Recipe)
		}
		if ValidateJSON(SchemaRequest, []byte(doc)) == nil {
			t.Errorf("schema accepts %s", doc)
		}
	}
}

func TestRecipeKeys(t *testing.T) {
	r := Request{S3Key: "u1/photo.jpg", S3Bucket: "media", MediaID: "550e8400-e29b-41d4-a716-446655440000"}
	if got, want := KeysFor(r).Image("high"), "u1/images/550e8400-e29b-41d4-a716-446655440000/photo_high.webp"; got != want {
		t.Errorf("default: %s, want %s", got, want)
	}
	r.Recipe = DefaultRecipe
	if got, want := KeysFor(r).ImageAs("high", "webp"), "u1/images/550e8400-e29b-41d4-a716-446655440000/photo_high.webp"; got != want {
		t.Errorf("named default: %s, want %s", got, want)
	}
	r.Recipe = "avatar"
	if got, want := KeysFor(r).ImageAs("avatar-jpeg", "jpg"), "u1/images/550e8400-e29b-41d4-a716-446655440000/avatar/photo_avatar-jpeg.jpg"; got != want {
		t.Errorf("named: %s, want %s", got, want)
	}
	if KeysFor(r).Longest() <= KeysFor(Request{S3Key: r.S3Key, MediaID: r.MediaID}).Longest() {
		t.Error("a named recipe's longest key is not longer than the default's")
	}
}

// A response that carries recipe may name its variants and use avif/png; one without it is held to the
// seed's enums by our schema too.
func TestResponseRecipeExtendsTheEnums(t *testing.T) {
	const id = `"mediaId":"550e8400-e29b-41d4-a716-446655440000","originalUrl":"https://a/b","success":true`
	named := `{` + id + `,"recipe":"avatar","processed":[{"quality":"avatar","format":"avif","url":"https://a/b.avif","size":1,"width":256,"height":256},{"quality":"avatar-jpeg","format":"jpg","url":"https://a/b.jpg","size":1}]}`
	if err := ValidateJSON(SchemaResponse, []byte(named)); err != nil {
		t.Errorf("a named recipe's answer is refused: %v", err)
	}
	for _, doc := range []string{
		`{` + id + `,"processed":[{"quality":"avatar","format":"webp","url":"https://a/b","size":1}]}`,
		`{` + id + `,"processed":[{"quality":"high","format":"png","url":"https://a/b","size":1}]}`,
		`{` + id + `,"recipe":"avatar","processed":[{"quality":"high","format":"jpeg","url":"https://a/b","size":1}]}`,
		`{` + id + `,"recipe":"Bad name","processed":[{"quality":"high","format":"webp","url":"https://a/b","size":1}]}`,
	} {
		if validateOne(SchemaResponse, []byte(doc)) == nil {
			t.Errorf("our schema accepts %s", doc)
		}
	}
}
