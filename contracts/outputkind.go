package contracts

import (
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// Output kinds: what an output key is, by the layout of OutputKeys, and the only content types the
// worker's HTTP server ever sends.
const (
	TypeWebP   = "image/webp"
	TypeMP4    = "video/mp4"
	TypeJPEG   = "image/jpeg"
	TypeM3U8   = "application/vnd.apple.mpegurl"
	TypeMPEGTS = "video/mp2t"
)

var (
	imageName = regexp.MustCompile(`^.+_(high|medium|low)\.webp$`)
	segName   = regexp.MustCompile(`^seg_[0-9]{3,}\.ts$`)
)

// OutputContentType returns the content type of key when key has the shape of an output key
// (`<dir>/images/<mediaId>/<stem>_<quality>.webp`, `<dir>/videos/<mediaId>/mp4/<stem>.mp4`,
// `<dir>/thumbnail/<mediaId>/poster.jpg`, `<dir>/videos/<mediaId>/hls/{index.m3u8,seg_NNN.ts}`), and
// false for every other key. The type comes from the layout, never from what the store recorded.
func OutputContentType(key string) (string, bool) {
	segs := strings.Split(key, "/")
	n := len(segs)
	isID := func(s string) bool {
		_, err := uuid.Parse(s)
		return err == nil && len(s) == 36
	}
	switch {
	case n >= 3 && segs[n-3] == "images" && isID(segs[n-2]) && imageName.MatchString(segs[n-1]):
		return TypeWebP, true
	case n >= 3 && segs[n-3] == "thumbnail" && isID(segs[n-2]) && segs[n-1] == "poster.jpg":
		return TypeJPEG, true
	case n >= 4 && segs[n-4] == "videos" && isID(segs[n-3]) && segs[n-2] == "mp4" &&
		strings.HasSuffix(segs[n-1], ".mp4") && len(segs[n-1]) > len(".mp4"):
		return TypeMP4, true
	case n >= 4 && segs[n-4] == "videos" && isID(segs[n-3]) && segs[n-2] == "hls" && segs[n-1] == "index.m3u8":
		return TypeM3U8, true
	case n >= 4 && segs[n-4] == "videos" && isID(segs[n-3]) && segs[n-2] == "hls" && segName.MatchString(segs[n-1]):
		return TypeMPEGTS, true
	}
	return "", false
}
