package pipeline

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gabriel-vasile/mimetype"
)

// MediaKind is what a job transforms: an image or a video.
type MediaKind string

const (
	Image MediaKind = "image"
	Video MediaKind = "video"
)

// accepted lists the content types we transform, by what the bytes say (never the key's extension),
// each by the name mimetype gives it; mimetype's aliases of a name match too (MIME.Is), so a type it
// renames between releases (v1.4.16 calls Matroska video/matroska, once video/x-matroska) stays
// accepted. Anything else is a permanent "unsupported media type".
//
// Only the most specific type mimetype detects is looked up, never its parents: a type we refuse must
// not get in through a parent we accept (AVIF's parent is video/mp4, and so is audio-only MP4's).
var accepted = []struct {
	mime string
	kind MediaKind
}{
	{"image/jpeg", Image},
	{"image/png", Image},
	{"image/apng", Image}, // a child of image/png: its first frame is a PNG
	{"image/webp", Image},
	{"image/gif", Image},
	{"image/heic", Image},
	{"image/heif", Image},
	{"image/heic-sequence", Image},
	{"image/heif-sequence", Image},
	{"image/avif", Image}, // stills and sequences; libvips' heif loader reads both
	{"image/tiff", Image},

	// The ISO base media family (ffmpeg's mov demuxer): phones, cameras, browsers, screen recorders.
	{"video/mp4", Video},
	{"video/quicktime", Video},
	{"video/x-m4v", Video},
	{"video/3gpp", Video},
	{"video/3gpp2", Video},
	// Matroska and WebM: screen recorders (OBS), browsers' MediaRecorder, Android.
	{"video/matroska", Video},
	{"video/webm", Video},
	// AVI: older cameras, dashcams, screen tools.
	{"video/x-msvideo", Video},
	// MPEG-PS: DVD camcorders and DVD rips (.mpg, .vob). mimetype also names an MPEG-1/2 elementary
	// stream video/mpeg; ffmpeg's demuxer allow-list (transcoder) takes only the program stream.
	{"video/mpeg", Video},
	// MPEG-TS and M2TS: camcorders (AVCHD .mts/.m2ts), TV recordings. mimetype does not detect
	// them; sniffTransportStream does.
	{mimeTransportStream, Video},
}

// mimeTransportStream names MPEG transport streams, plain (188-byte packets) or M2TS (192-byte).
const mimeTransportStream = "video/mp2t"

// renamed maps the names mimetype gives some types to the registered names we report.
var renamed = map[string]string{
	"audio/x-m4a": "audio/mp4", // an .m4a file: AAC or ALAC in an MP4 container
}

// sniffBytes is how much of the file detection reads: mimetype looks at the first 3 KiB, and the
// transport-stream check wants a run of packets.
const sniffBytes = 8 << 10

// Detect sniffs a file's content and says whether it is an image or a video we can transform.
func Detect(path string) (mime string, kind MediaKind, err error) {
	head, err := readHead(path, sniffBytes)
	if err != nil {
		return "", "", transient("detecting", fmt.Errorf("reading file: %w", err))
	}
	mime, kind = detectBytes(head)
	if kind == "" {
		return mime, "", permanent("detecting", fmt.Errorf("unsupported media type: %s", mime))
	}
	return mime, kind, nil
}

// detectBytes names the content of head and its kind, "" when we do not take it.
func detectBytes(head []byte) (string, MediaKind) {
	m := mimetype.Detect(head)
	if m.Parent() == nil && sniffTransportStream(head) { // mimetype had no idea
		return mimeTransportStream, Video
	}
	for _, a := range accepted {
		if m.Is(a.mime) {
			return m.String(), a.kind
		}
	}
	if r, ok := renamed[m.String()]; ok {
		return r, ""
	}
	return m.String(), ""
}

// sniffTransportStream reports whether head starts with MPEG-TS packets: a 0x47 sync byte every 188
// bytes, or, in M2TS (AVCHD camcorders, Blu-ray), every 192 bytes after a 4-byte timestamp. At least
// four packets must line up, all of those that head holds (up to sniffPackets).
func sniffTransportStream(head []byte) bool {
	const sniffPackets = 16
	for _, f := range []struct{ offset, size int }{{0, 188}, {4, 192}} {
		n := min((len(head)-f.offset)/f.size, sniffPackets)
		if n < 4 {
			continue
		}
		ok := true
		for i := range n {
			if head[f.offset+i*f.size] != 0x47 {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// readHead reads up to n bytes from the start of the file at path.
func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	got, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:got], nil
}

// SniffBytes is how much of an upload DetectBytes looks at: what Detect reads of a file.
const SniffBytes = sniffBytes

// DetectBytes is Detect on an upload's first bytes, the same table: triage sniffs the kind from a
// ranged read before the job is routed to its lane.
func DetectBytes(head []byte) (mime string, kind MediaKind, err error) {
	mime, kind = detectBytes(head)
	if kind == "" {
		return mime, "", permanent("detecting", fmt.Errorf("unsupported media type: %s", mime))
	}
	return mime, kind, nil
}
