package pipeline

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/transcoder"
)

// DefaultVideo names a recipe's video outputs when they are only the seed's: one MP4 and a poster.
const DefaultVideo = "default"

// Recipe is one output set a request may name. The default recipe (contracts.DefaultRecipe) is the
// seed contract's; a configuration may override it within what seed clients accept.
type Recipe struct {
	Name   string
	Images []transcoder.ImageVariantSpec // nil: the transformer's default variants
	Video  VideoRecipe
	// Documents makes a PDF's first page, or an SVG, the recipe's image variants (kind_document.go);
	// without it a document is refused as unsupported media, as it always was.
	Documents bool `json:",omitempty"`
}

// VideoRecipe is what a recipe makes of a video beside the MP4 and poster every recipe makes: MP4
// renditions (max heights of the short edge), an HLS ladder for players and a storyboard for their
// scrub bar. The zero value is DefaultVideo.
type VideoRecipe struct {
	MP4        []int                      `json:",omitempty"`
	HLS        *transcoder.LadderSpec     `json:",omitempty"`
	Storyboard *transcoder.StoryboardSpec `json:",omitempty"`
}

// IsDefault reports whether the recipe makes only the MP4 and poster.
func (v VideoRecipe) IsDefault() bool { return v.MP4 == nil && v.HLS == nil && v.Storyboard == nil }

// LadderMaker makes an HLS ladder in one run (transcoder.Videos does).
type LadderMaker interface {
	Ladder(ctx context.Context, probe *transcoder.VideoProbe, outDir string, spec transcoder.LadderSpec) (transcoder.LadderResult, error)
}

// StoryboardMaker makes a storyboard sprite and its VTT (transcoder.Videos does).
type StoryboardMaker interface {
	Storyboard(ctx context.Context, probe *transcoder.VideoProbe, outDir string, spec transcoder.StoryboardSpec) (transcoder.StoryboardResult, error)
}

// recipe returns the recipe a request names, or a refusal naming the recipes this worker knows. The
// refusal is the request's (a contracts.ParseError): answered at once, never retried, nothing uploaded.
func (c Config) recipe(req contracts.Request) (Recipe, error) {
	name := req.RecipeName()
	if r, ok := c.Recipes[name]; ok {
		return r, nil
	}
	if name == contracts.DefaultRecipe {
		return Recipe{Name: name}, nil
	}
	return Recipe{}, &contracts.ParseError{Field: "recipe", Correlatable: true,
		Reason: fmt.Sprintf("%q is not a recipe of this worker; it knows %s", name, strings.Join(c.recipeNames(), ", "))}
}

// RecipeNames lists the recipes requests may name, default first.
func (p *Pipeline) RecipeNames() []string { return p.cfg.recipeNames() }

// Asks reports whether any recipe turns kind on, for a kind only recipes turn on (job.Spec.OptIn).
func (c Config) Asks(kind MediaKind) bool {
	for _, r := range c.Recipes {
		if r.asks(kind) {
			return true
		}
	}
	return false
}

func (c Config) recipeNames() []string {
	names := []string{contracts.DefaultRecipe}
	for n := range c.Recipes {
		if n != contracts.DefaultRecipe {
			names = append(names, n)
		}
	}
	sort.Strings(names[1:])
	return names
}

// validateRecipes checks the configured recipes: names, variants, and a default that seed clients can
// read.
func validateRecipes(rs map[string]Recipe) error {
	for name, r := range rs {
		if err := contracts.ValidateName(name); err != nil {
			return fmt.Errorf("recipe name %w", err)
		}
		if r.Name != name {
			return fmt.Errorf("recipe %q is filed under %q", r.Name, name)
		}
		if name == contracts.DefaultRecipe && !r.Video.IsDefault() {
			return fmt.Errorf("recipe %q answers seed contract clients: its video outputs stay one MP4 and a poster", name)
		}
		if m := r.Video.MP4; m != nil {
			if err := transcoder.ValidateMP4Heights(m); err != nil {
				return fmt.Errorf("recipe %q: video %w", name, err)
			}
		}
		if h := r.Video.HLS; h != nil {
			if err := h.Validate(); err != nil {
				return fmt.Errorf("recipe %q: video hls: %w", name, err)
			}
		}
		if sb := r.Video.Storyboard; sb != nil {
			if err := sb.Validate(); err != nil {
				return fmt.Errorf("recipe %q: video storyboard: %w", name, err)
			}
		}
		if r.Images != nil { // nil: the default variants
			if err := transcoder.ValidateImageRecipe(r.Images); err != nil {
				return fmt.Errorf("recipe %q: %w", name, err)
			}
		}
	}
	return nil
}

// variantFormat is a variant's format as the response names it (JPEG is jpg, as in the seed contract),
// its key's extension, and its content type.
func variantFormat(f transcoder.ImageFormat) (format, contentType string) {
	switch f {
	case transcoder.FormatAVIF:
		return contracts.FormatAVIF, "image/avif"
	case transcoder.FormatJPEG:
		return contracts.FormatJPG, "image/jpeg"
	case transcoder.FormatPNG:
		return contracts.FormatPNG, "image/png"
	}
	return contracts.FormatWebP, "image/webp"
}
