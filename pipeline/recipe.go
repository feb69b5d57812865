package pipeline

import (
	"fmt"
	"sort"
	"strings"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/transcoder"
)

// DefaultVideo is the only video output set a recipe can name so far: one MP4 and a poster.
const DefaultVideo = "default"

// Recipe is one output set a request may name. The default recipe (contracts.DefaultRecipe) is the
// seed contract's; a configuration may override it within what seed clients accept.
type Recipe struct {
	Name   string
	Images []transcoder.ImageVariantSpec // nil: the transformer's default variants
	Video  string                        // DefaultVideo
}

// recipe returns the recipe a request names, or a refusal naming the recipes this worker knows. The
// refusal is the request's (a contracts.ParseError): answered at once, never retried, nothing uploaded.
func (p *Pipeline) recipe(req contracts.Request) (Recipe, error) {
	name := req.RecipeName()
	if r, ok := p.cfg.Recipes[name]; ok {
		return r, nil
	}
	if name == contracts.DefaultRecipe {
		return Recipe{Name: name, Video: DefaultVideo}, nil
	}
	return Recipe{}, &contracts.ParseError{Field: "recipe", Correlatable: true,
		Reason: fmt.Sprintf("%q is not a recipe of this worker; it knows %s", name, strings.Join(p.RecipeNames(), ", "))}
}

// RecipeNames lists the recipes requests may name, default first.
func (p *Pipeline) RecipeNames() []string {
	names := []string{contracts.DefaultRecipe}
	for n := range p.cfg.Recipes {
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
		if r.Video != DefaultVideo {
			return fmt.Errorf("recipe %q: video must be %q, got %q", name, DefaultVideo, r.Video)
		}
		if r.Images == nil && name == contracts.DefaultRecipe {
			continue
		}
		if err := transcoder.ValidateImageRecipe(r.Images); err != nil {
			return fmt.Errorf("recipe %q: %w", name, err)
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
