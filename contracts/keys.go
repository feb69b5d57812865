package contracts

import (
	"path"
	"strings"
)

// OutputKeys names every object a request may produce. Keys are deterministic (a retry overwrites instead of
// duplicating) and include the mediaId (two uploads named photo.jpg never collide). They live under the
// request key's directory and never equal the request key.
type OutputKeys struct {
	dir, stem, mediaID string
	recipe             string // "" for the default recipe, whose keys are the seed's
}

// KeysFor derives the output keys of a validated request.
func KeysFor(r Request) OutputKeys {
	dir := path.Dir(r.S3Key)
	if dir == "." {
		dir = ""
	}
	base := path.Base(r.S3Key)
	stem := strings.TrimSuffix(base, path.Ext(base))
	if stem == "" { // ".jpg" → keep something readable
		stem = base
	}
	k := OutputKeys{dir: dir, stem: stem, mediaID: r.MediaID}
	if r.RecipeName() != DefaultRecipe {
		k.recipe = r.Recipe
	}
	return k
}

func (k OutputKeys) join(parts ...string) string {
	if k.dir != "" {
		parts = append([]string{k.dir}, parts...)
	}
	return strings.Join(parts, "/")
}

// Image is <dir>/images/<mediaId>/<stem>_<quality>.webp.
func (k OutputKeys) Image(quality string) string { return k.ImageAs(quality, FormatWebP) }

// ImageAs is the key of an image variant named name with extension ext: for the default recipe
// <dir>/images/<mediaId>/<stem>_<name>.<ext>, for a named one <dir>/images/<mediaId>/<recipe>/<stem>_<name>.<ext>,
// so two recipes' variants of one upload never overwrite each other.
func (k OutputKeys) ImageAs(name, ext string) string {
	if k.recipe != "" {
		return k.join("images", k.mediaID, k.recipe, k.stem+"_"+name+"."+ext)
	}
	return k.join("images", k.mediaID, k.stem+"_"+name+"."+ext)
}

// Video is <dir>/videos/<mediaId>/mp4/<stem>.mp4.
func (k OutputKeys) Video() string { return k.join("videos", k.mediaID, "mp4", k.stem+".mp4") }

// Poster is <dir>/thumbnail/<mediaId>/poster.jpg.
func (k OutputKeys) Poster() string { return k.join("thumbnail", k.mediaID, "poster.jpg") }

// HLS is <dir>/videos/<mediaId>/hls/<name> (index.m3u8 and its segments).
func (k OutputKeys) HLS(name string) string { return k.join("videos", k.mediaID, "hls", name) }

// Storyboard is <dir>/videos/<mediaId>/storyboard/<name> (storyboard.jpg, the sprite, and
// storyboard.vtt, its cues): one directory, so a signed prefix covers both and the VTT's relative
// sprite URL resolves beside it.
func (k OutputKeys) Storyboard(name string) string {
	return k.join("videos", k.mediaID, "storyboard", name)
}

// Dir is the request key's directory ("" at the bucket root).
func (k OutputKeys) Dir() string { return k.dir }

// MaxHLSNameBytes bounds the names passed to HLS ("index.m3u8", "seg_000.ts", ...), so the longest
// output key is known when a request is validated.
const MaxHLSNameBytes = 16

// Longest is the length in bytes of the longest key these outputs can have. Request.Validate
// refuses keys whose outputs would exceed MaxKeyBytes: the upload would fail only after the work.
func (k OutputKeys) Longest() int {
	n := 0
	keys := []string{
		k.Image(QualityMedium), k.Image(QualityHigh), k.Image(QualityLow), k.Video(), k.Poster(),
		k.HLS(strings.Repeat("x", MaxHLSNameBytes)),
	}
	if k.recipe != "" { // a named recipe's variants may have any valid name
		keys = append(keys, k.ImageAs(strings.Repeat("x", MaxNameBytes), FormatAVIF))
	}
	for _, key := range keys {
		n = max(n, len(key))
	}
	return n
}
