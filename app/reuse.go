package app

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/mediaworker/mediaworker/facts"
	"github.com/mediaworker/mediaworker/pipeline"
)

// reuseFingerprint names the settings that shape outputs (image and video settings, recipes, the
// facts' algorithms): outputs remembered under other settings are never handed out as these. A
// restart with a changed setting simply starts a fresh memory for the affected outputs. clamd's
// signatures are no part of it: every upload is scanned, remembered or not (pipeline/reuse.go).
func reuseFingerprint(cfg Config) string {
	data, _ := json.Marshal(struct {
		Images  any
		Videos  any
		Recipes map[string]pipeline.Recipe
		Facts   string
	}{cfg.Images, cfg.Videos, cfg.Pipeline.Recipes, facts.Version})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}
