package pipeline

import (
	"image/jpeg"
	"os"

	"github.com/mediaworker/mediaworker/facts"
)

// addFacts puts the asset's facts (an image's, or a video's poster frame's) and the upload's SHA-256
// into the answer's metadata. Facts are extras: a picture they could not be computed from still
// gets its variants, with the hash alone.
func (j *job) addFacts(f *facts.Facts) {
	md := j.out.Response.Metadata
	if md == nil {
		return
	}
	md.SHA256 = j.sha256
	if f == nil {
		return
	}
	md.ThumbHash, md.DominantColor, md.Palette, md.PHash = f.ThumbHash, f.DominantColor, f.Palette, f.PHash
	md.FactsAlgorithm = facts.Version
}

// noFactsWarning is the answer's warning when a success carries no asset facts: the contract
// promises them on every success, so their absence is said (docs/contract.md, "Asset facts"). A
// video without a poster has no picture to compute them from; its "no poster" warning says so.
const noFactsWarning = "no asset facts (thumbhash, dominantColor, palette, phash): they could not be computed from the picture"

// posterFacts computes the facts of a video's poster (a JPEG the transcoder wrote), nil when it
// cannot.
func posterFacts(path string) *facts.Facts {
	fh, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer fh.Close()
	img, err := jpeg.Decode(fh)
	if err != nil {
		return nil
	}
	f, err := facts.FromImage(img)
	if err != nil {
		return nil
	}
	return &f
}
