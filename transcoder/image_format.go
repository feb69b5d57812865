package transcoder

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
)

// sniffedImage is what an image file's first bytes say it is, independently of libvips: the name a
// person knows the format by (for messages), and whether it is animated in a way the header read
// alone does not tell.
type sniffedImage struct {
	Format   string // "JPEG", "PNG", "GIF", "WebP", "TIFF", "HEIF", "AVIF", "BMP", ... or "" when unknown
	Animated bool   // an APNG (acTL chunk) or an AVIF image sequence (brand avis)
	Frames   int    // frames an APNG's acTL declares; 0 when not known from the first bytes
	// Capped marks ffmpeg's intermediate of a source whose frame count is unknown: it holds at
	// most one frame more than the animation budget, so more frames than that mean "more than".
	Capped bool
	// FirstFrameOnly marks ffmpeg's intermediate of an animation no variant keeps: it holds the
	// first frame only, and the source was animated all the same.
	FirstFrameOnly bool
}

// sniffLen is how much of the file sniffImage reads: enough for an ftyp box and the PNG chunks
// before the first IDAT in files that cameras and editors write.
const sniffLen = 4096

// sniffImage reads the start of path. It never fails: an unreadable file sniffs as unknown, and the
// decoder reports the real problem.
func sniffImage(path string) sniffedImage {
	f, err := os.Open(path)
	if err != nil {
		return sniffedImage{}
	}
	defer f.Close()
	buf := make([]byte, sniffLen)
	n, _ := io.ReadFull(f, buf)
	return sniffBytes(buf[:n])
}

func sniffBytes(b []byte) sniffedImage {
	switch {
	case bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF}):
		return sniffedImage{Format: "JPEG"}
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		frames := apngFrames(b[8:])
		return sniffedImage{Format: "PNG", Animated: frames > 0, Frames: frames}
	case bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a")):
		return sniffedImage{Format: "GIF"}
	case len(b) >= 12 && string(b[0:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return sniffedImage{Format: "WebP"}
	case bytes.HasPrefix(b, []byte("II*\x00")) || bytes.HasPrefix(b, []byte("MM\x00*")) ||
		bytes.HasPrefix(b, []byte("II+\x00")) || bytes.HasPrefix(b, []byte("MM\x00+")):
		return sniffedImage{Format: "TIFF"}
	case bytes.HasPrefix(b, []byte("BM")):
		return sniffedImage{Format: "BMP"}
	case len(b) >= 12 && string(b[4:8]) == "ftyp":
		return sniffFtyp(b)
	}
	return sniffedImage{}
}

// apngFrames returns the frame count of an acTL chunk (APNG's animation control) that comes before
// the first IDAT, or 0 when there is none.
func apngFrames(b []byte) int {
	for len(b) >= 12 {
		size := int(binary.BigEndian.Uint32(b[0:4]))
		switch string(b[4:8]) {
		case "acTL":
			if size >= 8 && len(b) >= 16 {
				return max(1, int(min(binary.BigEndian.Uint32(b[8:12]), 1<<30)))
			}
			return 1
		case "IDAT":
			return 0
		}
		if size < 0 || size > len(b)-12 {
			return 0
		}
		b = b[12+size:]
	}
	return 0
}

// sniffFtyp names an ISO-BMFF image by the brands of its ftyp box.
func sniffFtyp(b []byte) sniffedImage {
	size := int(binary.BigEndian.Uint32(b[0:4]))
	if size < 16 || size > len(b) {
		size = min(len(b), 64)
	}
	brands := map[string]bool{string(b[8:12]): true}
	for off := 16; off+4 <= size; off += 4 {
		brands[string(b[off:off+4])] = true
	}
	switch {
	case brands["avis"]:
		return sniffedImage{Format: "AVIF", Animated: true}
	case brands["avif"]:
		return sniffedImage{Format: "AVIF"}
	case brands["heic"] || brands["heix"] || brands["mif1"] || brands["msf1"] || brands["hevc"] || brands["heim"] || brands["heis"]:
		return sniffedImage{Format: "HEIF"}
	}
	return sniffedImage{}
}
