package contracts

import (
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// Output kinds: what an output key is, by the layout of OutputKeys, and the only content types the
// worker's HTTP server ever sends.
const (
	TypeWebP    = "image/webp"
	TypeAVIF    = "image/avif"
	TypePNG     = "image/png"
	TypeMP4     = "video/mp4"
	TypeJPEG    = "image/jpeg"
	TypeM3U8    = "application/vnd.apple.mpegurl"
	TypeMPEGTS  = "video/mp2t"
	TypeSegment = "video/iso.segment" // a CMAF (fMP4) media segment, RFC 8216bis
	TypeVTT     = "text/vtt"
)

var (
	// The default recipe's variants: high, medium, low, in webp or (an overridden default) jpg.
	defaultImageName = regexp.MustCompile(`^.+_(high|medium|low)\.(webp|jpg)$`)
	// A named recipe's: any variant name.
	recipeImageName = regexp.MustCompile(`^.+_[a-z0-9][a-z0-9_-]{0,31}\.(webp|avif|jpg|png)$`)
	segName         = regexp.MustCompile(`^seg_[0-9]{3,}\.ts$`)
	// An HLS ladder's files: playlists, init segments and CMAF media segments, named by rendition.
	ladderPlaylist = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,11}\.m3u8$`)
	ladderInit     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,6}_init\.mp4$`)
	ladderSegment  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,6}_[0-9]{3,}\.m4s$`)
	imageTypes     = map[string]string{"webp": TypeWebP, "avif": TypeAVIF, "jpg": TypeJPEG, "png": TypePNG}
)

// OutputContentType returns the content type of key when key has the shape of an output key
// (`<dir>/images/<mediaId>/<stem>_<quality>.webp`, `<dir>/images/<mediaId>/<recipe>/<stem>_<name>.<ext>`,
// `<dir>/videos/<mediaId>/mp4/<stem>.mp4`, `<dir>/thumbnail/<mediaId>/poster.jpg`,
// `<dir>/videos/<mediaId>/hls/…` (playlists and segments), `<dir>/videos/<mediaId>/storyboard/storyboard.{jpg,vtt}`),
// and false for every other key. The type comes from the layout, never from what the store recorded.
func OutputContentType(key string) (string, bool) {
	segs := strings.Split(key, "/")
	n := len(segs)
	isID := func(s string) bool {
		_, err := uuid.Parse(s)
		return err == nil && len(s) == 36
	}
	ext := func(name string) string { return name[strings.LastIndexByte(name, '.')+1:] }
	last := segs[n-1]
	switch {
	case n >= 3 && segs[n-3] == "images" && isID(segs[n-2]) && defaultImageName.MatchString(last):
		return imageTypes[ext(last)], true
	case n >= 4 && segs[n-4] == "images" && isID(segs[n-3]) && ValidateName(segs[n-2]) == nil && recipeImageName.MatchString(last):
		return imageTypes[ext(last)], true
	case n >= 3 && segs[n-3] == "thumbnail" && isID(segs[n-2]) && last == "poster.jpg":
		return TypeJPEG, true
	case n >= 4 && segs[n-4] == "videos" && isID(segs[n-3]) && segs[n-2] == "mp4" &&
		strings.HasSuffix(last, ".mp4") && len(last) > len(".mp4"):
		return TypeMP4, true
	case n >= 4 && segs[n-4] == "videos" && isID(segs[n-3]) && segs[n-2] == "hls":
		switch {
		case last == "index.m3u8" || ladderPlaylist.MatchString(last):
			return TypeM3U8, true
		case segName.MatchString(last):
			return TypeMPEGTS, true
		case ladderInit.MatchString(last):
			return TypeMP4, true
		case ladderSegment.MatchString(last):
			return TypeSegment, true
		}
	case n >= 4 && segs[n-4] == "videos" && isID(segs[n-3]) && segs[n-2] == "storyboard":
		switch last {
		case "storyboard.jpg":
			return TypeJPEG, true
		case "storyboard.vtt":
			return TypeVTT, true
		}
	}
	return "", false
}

// SignsPrefix reports whether key is one of a set of files that refer to each other by relative URL (an
// HLS ladder's playlists and segments, a storyboard's VTT and sprite): a signed URL for it must cover
// its whole directory, or the URLs a player resolves from it would lack the signature.
func SignsPrefix(key string) bool {
	segs := strings.Split(key, "/")
	n := len(segs)
	return n >= 4 && segs[n-4] == "videos" && (segs[n-2] == "hls" || segs[n-2] == "storyboard")
}
