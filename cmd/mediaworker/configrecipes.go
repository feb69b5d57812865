package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/transcoder"
)

// The recipes section names output sets a request may ask for with "recipe":
//
//	recipes:
//	  avatar:
//	    images:
//	      - {name: avatar, width: 256, height: 256, fit: cover, crop: attention, format: avif, quality: 60}
//	    video: default
//
// Each field is checked where it is written, so a mistake is reported at its own line; what only the
// whole recipe can tell (two variants of one name) at the recipe's.

// maxVariantSide is the largest box side a variant may ask for (WebP's limit; the transcoder's
// Validate says the same, but checked here the mistake is reported at the value's own position).
const maxVariantSide = 16383

// variantKeys are a variant's fields, in the order the docs list them.
var variantKeys = []string{"name", "width", "height", "fit", "crop", "format", "quality", "animated"}

// recipeKeys are a recipe's fields.
var recipeKeys = []string{"images", "video", "documents"}

// decodeRecipes reads the recipes section. The default recipe may be overridden, within what the seed
// contract's answers allow (seedSafe).
func (f *configFile) decodeRecipes() (map[string]pipeline.Recipe, []error) {
	out := map[string]pipeline.Recipe{}
	if f.recipes == nil || f.recipes.Tag == "!!null" {
		return out, nil
	}
	if f.recipes.Kind != yaml.MappingNode {
		return nil, []error{f.errAt(f.recipes, recipesSection, "must be a mapping of recipe names to recipes, got %s", kindName(f.recipes))}
	}
	var errs []error
	for i := 0; i+1 < len(f.recipes.Content); i += 2 {
		kn, vn := f.recipes.Content[i], f.recipes.Content[i+1]
		dotted := recipesSection + "." + kn.Value
		if err := contracts.ValidateName(kn.Value); err != nil {
			errs = append(errs, f.errAt(kn, dotted, "the recipe's name %s", err))
			continue
		}
		if _, dup := out[kn.Value]; dup {
			errs = append(errs, f.errAt(kn, dotted, "appears twice"))
			continue
		}
		r, rerrs := f.decodeRecipe(kn.Value, dotted, vn)
		if len(rerrs) > 0 {
			errs = append(errs, rerrs...)
			continue
		}
		if r.Images != nil {
			if err := transcoder.ValidateImageRecipe(r.Images); err != nil {
				errs = append(errs, f.errAt(kn, dotted+".images", "%v", err))
				continue
			}
		}
		if kn.Value == contracts.DefaultRecipe {
			if problem := seedSafe(r); problem != "" {
				errs = append(errs, f.errAt(kn, dotted, "%s", problem))
				continue
			}
		}
		out[kn.Value] = r
	}
	return out, errs
}

func (f *configFile) decodeRecipe(name, dotted string, n *yaml.Node) (pipeline.Recipe, []error) {
	r := pipeline.Recipe{Name: name}
	if n.Kind != yaml.MappingNode {
		return r, []error{f.errAt(n, dotted, "must be a mapping with images (and video), got %s", kindName(n))}
	}
	var errs []error
	hasImages := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key := dotted + "." + kn.Value
		switch kn.Value {
		case "images":
			hasImages = true
			if vn.Kind != yaml.SequenceNode || len(vn.Content) == 0 {
				errs = append(errs, f.errAt(vn, key, "must be a list of variants, got %s", kindName(vn)))
				continue
			}
			for j, item := range vn.Content {
				v, verrs := f.decodeVariant(fmt.Sprintf("%s[%d]", key, j), item)
				errs = append(errs, verrs...)
				r.Images = append(r.Images, v)
			}
		case "video":
			v, verrs := f.decodeVideo(key, vn)
			errs = append(errs, verrs...)
			r.Video = v
		case "documents":
			d, err := f.decodeDocuments(key, vn)
			if err != nil {
				errs = append(errs, err)
			}
			r.Documents = d
		default:
			errs = append(errs, f.errAt(kn, key, "%s", unknownKey("key", kn.Value, recipeKeys)))
		}
	}
	if !hasImages && r.Video.IsDefault() && !r.Documents && len(errs) == 0 {
		errs = append(errs, f.errAt(n, dotted, "has no images and no video outputs: list its image variants under images: (a recipe with only video: images get the default variants)"))
	}
	return r, errs
}

// decodeVariant reads one image variant, checking each field at its own position.
func (f *configFile) decodeVariant(dotted string, n *yaml.Node) (transcoder.ImageVariantSpec, []error) {
	var v transcoder.ImageVariantSpec
	if n.Kind != yaml.MappingNode {
		return v, []error{f.errAt(n, dotted, "must be a mapping such as {name: thumb, width: 320, height: 320, fit: cover, format: webp}, got %s", kindName(n))}
	}
	var errs []error
	bad := func(vn *yaml.Node, key, format string, args ...any) {
		errs = append(errs, f.errAt(vn, dotted+"."+key, format, args...))
	}
	num := func(vn *yaml.Node, key string, lo, hi int, dst *int) {
		if vn.Kind != yaml.ScalarNode || vn.Tag != "!!int" {
			bad(vn, key, "must be a whole number from %d to %d, got %s", lo, hi, kindName(vn))
			return
		}
		var x int
		if _, err := fmt.Sscan(vn.Value, &x); err != nil || x < lo || x > hi {
			bad(vn, key, "must be from %d to %d, got %s", lo, hi, vn.Value)
			return
		}
		*dst = x
	}
	word := func(vn *yaml.Node, key string, allowed []string) string {
		if vn.Kind != yaml.ScalarNode || vn.Tag != "!!str" {
			bad(vn, key, "must be one of %s, got %s", strings.Join(allowed, ", "), kindName(vn))
			return ""
		}
		for _, a := range allowed {
			if vn.Value == a {
				return a
			}
		}
		bad(vn, key, "must be one of %s, got %q", strings.Join(allowed, ", "), vn.Value)
		return ""
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if seen[kn.Value] {
			bad(kn, kn.Value, "appears twice")
			continue
		}
		seen[kn.Value] = true
		switch kn.Value {
		case "name":
			if vn.Kind != yaml.ScalarNode || vn.Tag != "!!str" {
				bad(vn, "name", "must be text, got %s", kindName(vn))
			} else if err := contracts.ValidateName(vn.Value); err != nil {
				bad(vn, "name", "%v", err)
			} else {
				v.Name = vn.Value
			}
		case "width":
			num(vn, "width", 0, maxVariantSide, &v.Width)
		case "height":
			num(vn, "height", 0, maxVariantSide, &v.Height)
		case "quality":
			num(vn, "quality", 1, 100, &v.Quality)
		case "fit":
			v.Fit = transcoder.Fit(word(vn, "fit", []string{string(transcoder.FitInside), string(transcoder.FitCover)}))
		case "crop":
			v.Crop = transcoder.Crop(word(vn, "crop", []string{string(transcoder.CropAttention), string(transcoder.CropEntropy), string(transcoder.CropCentre)}))
		case "format":
			v.Format = transcoder.ImageFormat(word(vn, "format", []string{"webp", "avif", "jpeg", "png"}))
		case "animated":
			if vn.Kind != yaml.ScalarNode || vn.Tag != "!!bool" {
				bad(vn, "animated", "must be true or false, got %s", kindName(vn))
			} else {
				v.Animated = vn.Value == "true"
			}
		default:
			bad(kn, kn.Value, "%s", unknownKey("key", kn.Value, variantKeys))
		}
	}
	if !seen["name"] {
		errs = append(errs, f.errAt(n, dotted, "has no name (the answer's quality and part of the output key)"))
	}
	if len(errs) == 0 {
		if err := v.Validate(); err != nil {
			errs = append(errs, f.errAt(n, dotted, "%v", err))
		}
	}
	return v, errs
}

// fields reads a mapping whose keys each have a reader; an unknown or repeated key is an error at
// its position.
func (f *configFile) fields(dotted string, n *yaml.Node, readers map[string]func(*yaml.Node, string) error) []error {
	if n.Kind != yaml.MappingNode {
		return []error{f.errAt(n, dotted, "must be a mapping, got %s", kindName(n))}
	}
	known := make([]string, 0, len(readers))
	for k := range readers {
		known = append(known, k)
	}
	sort.Strings(known)
	var errs []error
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key := dotted + "." + kn.Value
		read, ok := readers[kn.Value]
		switch {
		case !ok:
			errs = append(errs, f.errAt(kn, key, "%s", unknownKey("key", kn.Value, known)))
		case seen[kn.Value]:
			errs = append(errs, f.errAt(kn, key, "appears twice"))
		default:
			if err := read(vn, key); err != nil {
				errs = append(errs, err)
			}
		}
		seen[kn.Value] = true
	}
	return errs
}

// whole reads a whole number; number reads any number.
func (f *configFile) whole(dst *int) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return f.errAt(n, key, "must be a whole number, got %s", kindName(n))
		}
		_, err := fmt.Sscan(n.Value, dst)
		if err != nil {
			return f.errAt(n, key, "must be a whole number, got %s", n.Value)
		}
		return nil
	}
}

func (f *configFile) number(dst *float64) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			return f.errAt(n, key, "must be a number, got %s", kindName(n))
		}
		_, err := fmt.Sscan(n.Value, dst)
		if err != nil {
			return f.errAt(n, key, "must be a number, got %s", n.Value)
		}
		return nil
	}
}

func joinErrs(errs []error) error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return errors.Join(out...)
}

// seedSafe says what an overridden default recipe must not do: a request that names no recipe is a
// seed contract client's, whose answers' variants are high, medium or low in webp or jpg.
func seedSafe(r pipeline.Recipe) string {
	for _, v := range r.Images {
		switch v.Name {
		case contracts.QualityHigh, contracts.QualityMedium, contracts.QualityLow:
		default:
			return fmt.Sprintf("the default recipe answers seed contract clients: its variants must be named high, medium or low, not %q (define a recipe of another name for other outputs)", v.Name)
		}
		if v.Format != "" && v.Format != transcoder.FormatWebP && v.Format != transcoder.FormatJPEG {
			return fmt.Sprintf("the default recipe answers seed contract clients: its variants must be webp or jpeg, not %s (define a recipe of another name for other formats)", v.Format)
		}
	}
	if r.Documents {
		return documentsNotInDefault
	}
	if !r.Video.IsDefault() {
		return "the default recipe answers seed contract clients: its video stays one MP4 and a poster (define a recipe of another name for mp4 renditions, HLS or a storyboard)"
	}
	return ""
}

// recipeNames lists the recipes known with these overrides, for `config` and errors.
func recipeNames(m map[string]pipeline.Recipe) []string {
	names := []string{contracts.DefaultRecipe}
	for n := range m {
		if n != contracts.DefaultRecipe {
			names = append(names, n)
		}
	}
	sort.Strings(names[1:])
	return names
}

// variantDocs describes a variant's fields, for docs/operations.md (settingsdoc.go).
var variantDocs = map[string]string{
	"name":     "required; the answer's `quality` and part of the output key: lowercase letters, digits, `_`, `-`, at most 32 bytes",
	"width":    "box width in pixels, 0 = free (at least one of width and height is set; at most 16383)",
	"height":   "box height in pixels, 0 = free",
	"fit":      "`inside` (default): fit within the box, never enlarged; `cover`: fill the box exactly and crop the rest (never enlarged either: a smaller source is cropped to the box's shape)",
	"crop":     "with `cover`, what is kept: `attention` (default; libvips' smart crop, which looks for skin, saturated colour and edges), `entropy` (the busiest part) or `centre`",
	"format":   "`webp` (default), `avif` (AV1, alpha kept), `jpeg` (alpha flattened onto white; answered as `jpg`, as in the seed contract) or `png` (lossless with alpha, for graphics: several times the size of the others for photos)",
	"quality":  "1–100 (none for `png`, which is lossless); omitted: the format's default (webp and jpeg 75, avif 50)",
	"animated": "keep an animated source animated (webp variants with `fit: inside` only, within the animation limits); otherwise, or when false, the first frame, with a warning when the source was animated",
}
