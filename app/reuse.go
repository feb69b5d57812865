package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"

	"github.com/mediaworker/mediaworker/facts"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
)

// reuseFingerprint names the settings that shape outputs (image and video settings, recipes, the
// facts' algorithms): outputs remembered under other settings are never handed out as these. A
// restart with a changed setting simply starts a fresh memory for the affected outputs.
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

var notKeyChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// signatureVersion asks clamd which signatures it scans with, for the reuse memory's key, at every
// lookup: a reload (freshclam) is seen by the next upload. An official database is its daily version;
// a development database has none, so its engine stands for it (its signatures do not change without
// a restart in practice, and it is for tests only).
func signatureVersion(s *scanner.Scanner) pipeline.SignatureVersion {
	return func(ctx context.Context) (string, error) {
		sig, err := s.Signatures(ctx)
		if err != nil {
			return "", err
		}
		if sig.Version > 0 {
			return "v" + notKeyChars.ReplaceAllString(sig.Engine, "_") + "-" + uitoa(sig.Version), nil
		}
		return "dev-" + notKeyChars.ReplaceAllString(sig.Engine, "_"), nil
	}
}

func uitoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
