package app

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/mediaworker/mediaworker/facts"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/transcoder"
)

// reuseFingerprint names the settings that shape outputs (image and video settings, recipes, the
// facts' algorithms): outputs remembered under other settings are never handed out as these. A
// restart with a changed setting simply starts a fresh memory for the affected outputs. clamd's
// signatures are no part of it: every upload is scanned, remembered or not (pipeline/reuse.go).
func reuseFingerprint(cfg Config) string {
	var documents *transcoder.DocumentConfig // only where a recipe renders documents: others keep their fingerprint
	for _, r := range cfg.Pipeline.Recipes {
		if r.Documents {
			documents = &cfg.Documents
		}
	}
	data, _ := json.Marshal(struct {
		Images    any
		Videos    any
		Recipes   map[string]pipeline.Recipe
		Facts     string
		Documents *transcoder.DocumentConfig `json:",omitempty"`
	}{cfg.Images, cfg.Videos, cfg.Pipeline.Recipes, facts.Version, documents})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}
