package app_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// TestRefusedRecipeIsNotEchoed: issue 31 item 9. A request refused for its recipe name was answered
// with that name echoed as "recipe", which response.schema.json allows only as a name: an API that
// validates answers threw away the only answer it got. The worker echoes only a recipe that passed
// validation; every answer is checked against the schema as it arrives (world.listen).
func TestRefusedRecipeIsNotEchoed(t *testing.T) {
	w := startWorld(t, app.StorageNATS, testenv.StartClamd(t), nil)
	for _, tc := range []struct {
		name, recipe string // recipe as a JSON string's body
		echo         string // what the answer's recipe must be
		err          string
	}{
		{"dot-dot", `../card`, "", `invalid request: recipe "../card" must be lowercase letters, digits, '_' or '-', starting with a letter or digit`},
		{"NUL", `card\u0000`, "", `invalid request: recipe "card\x00" must be lowercase letters, digits, '_' or '-', starting with a letter or digit`},
		{"markup", `<script>alert(1)</script>`, "", `invalid request: recipe "<script>alert(1)</script>" must be lowercase letters, digits, '_' or '-', starting with a letter or digit`},
		{"33 bytes", `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa`, "", "invalid request: recipe is 33 bytes, limit is 32"},
		// A valid name this worker does not know passed validation: it is echoed.
		{"unknown but valid", `card`, "card", `invalid request: recipe "card" is not a recipe of this worker; it knows default`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := uuid.NewString()
			w.publishRaw([]byte(`{"s3Key":"u/p.jpg","s3Bucket":"media","mediaId":"`+id+`","mediaUrl":"https://api.example/m/1","recipe":"`+tc.recipe+`"}`), id)
			r := w.await(id, time.Minute)
			if r.Success || r.Error != tc.err {
				t.Errorf("got success=%v error %s, want %s", r.Success, strconv.Quote(r.Error), strconv.Quote(tc.err))
			}
			if r.Recipe != tc.echo {
				t.Errorf("the answer echoes recipe %q, want %q", r.Recipe, tc.echo)
			}
			if err := contracts.Validate(contracts.SchemaResponse, r); err != nil {
				t.Errorf("the answer fails response.schema.json: %v", err)
			}
		})
	}
}
