package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gabriel-vasile/mimetype"

	vocab "github.com/mediaworker/mediaworker/job" // the job's vocabulary; "job" here is one running job
	"github.com/mediaworker/mediaworker/transcoder"
)

// MediaKind is what a job transforms: an image or a video (job.Kind).
type MediaKind = vocab.Kind

const (
	Image = vocab.Image
	Video = vocab.Video
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
	// Documents: only for recipes that ask for them (documentsRefused), refused as before otherwise.
	{"application/pdf", Document},
	{"image/svg+xml", Document},

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
	// stream video/mpeg; misnamed refuses that before (ffmpeg's demuxer allow-list, in transcoder,
	// takes only the program stream).
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
	return refuseOrAccept(detectBytes(head))
}

// refuseOrAccept turns detectBytes' answer into Detect's: a kind "" is refused, in the words of a
// refusal that names what was found when there is one.
func refuseOrAccept(mime string, kind MediaKind, refusal string) (string, MediaKind, error) {
	switch {
	case refusal != "":
		return mime, "", refuse("detecting", refusal)
	case kind == "":
		return mime, "", refuse("detecting", "unsupported media type: "+mime)
	}
	return mime, kind, nil
}

// detectBytes names the content of head and its kind, "" when we do not take it; refusal, when not
// "", is a sentence that says what the file is and why it is refused (misnamed, rawVideo).
func detectBytes(head []byte) (mime string, kind MediaKind, refusal string) {
	if mime, refusal := misnamed(head); refusal != "" {
		return mime, "", refusal
	}
	m := mimetype.Detect(head)
	if mime, kind, refusal, ok := heifImage(head, m); ok {
		return mime, kind, refusal
	}
	if m.Parent() == nil { // mimetype had no idea
		if sniffTransportStream(head) {
			return mimeTransportStream, Video, ""
		}
		if mime, refusal := rawVideo(head); refusal != "" {
			return mime, "", refusal
		}
	}
	for _, a := range accepted {
		if m.Is(a.mime) {
			return m.String(), a.kind, ""
		}
	}
	if r, ok := renamed[m.String()]; ok {
		return r, "", ""
	}
	return m.String(), "", ""
}

// heifImage names a HEIF or AVIF image by its structure (a meta box whose primary item is a picture,
// or a low-overhead mini box), not only by its brand: mimetype maps a few major brands (heic, mif1,
// avif, ...) and calls every other ISO base media file video/mp4, so a HEIF image with another brand
// (mif2, mif3, MiHE, a converter's own) was probed as a video and refused as "not a supported video".
// One whose pictures this libheif does not decode (ISO 23001-17 uncompressed, compressed with deflate
// or brotli, JPEG 2000, the 2025 mini form) is refused here, saying what it is, rather than by the
// decoder as having "no primary picture"; so is one with a brand libvips does not open. ok is false
// for anything else: detection goes on as before.
func heifImage(head []byte, m *mimetype.MIME) (mime string, kind MediaKind, refusal string, ok bool) {
	if isoBrand(head) == "" {
		return "", "", "", false
	}
	heif, avif, refusal := transcoder.HEIFUnsupported(head)
	if !heif {
		return "", "", "", false
	}
	mime = "image/heif"
	if avif {
		mime = "image/avif"
	}
	mapped := false
	for _, a := range accepted {
		if a.kind == Image && m.Is(a.mime) {
			mime, mapped = m.String(), true // the name mimetype gives it, as before
			break
		}
	}
	switch {
	case refusal != "":
		return mime, "", refusal, true
	case !mapped:
		// libvips' HEIF loader takes a file by its major brand, from the list mimetype maps (heic,
		// heix, hevc, mif1, msf1, avif, ...): one with another brand cannot be opened.
		return mime, "", fmt.Sprintf("HEIF image with an unsupported brand (%q; heic, mif1, avif and the other common brands are supported)", isoBrand(head)), true
	}
	return mime, Image, "", true
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
	return refuseOrAccept(detectBytes(head))
}

// Files that reach detection as something they are not. mimetype names a Canon CR3 "video/mp4" (any
// ISO base media file is, without a brand it knows) and an MPEG-1/2 video elementary stream
// "video/mpeg", the program stream's name; both got past detection and were refused by ffprobe as
// "not a supported video", which told the person neither what the file was nor what to do. Raw
// H.264 and HEVC streams mimetype does not name at all ("application/octet-stream"). Each is refused
// here instead, in the detecting stage, saying what was found. (The accepted types are untouched: a
// CR3 has no other brand we take, and a program stream starts with a pack header, 00 00 01 BA.)

// misnamed names a file we refuse whatever mimetype calls it: its type and the refusal's sentence,
// or "" for anything else.
func misnamed(head []byte) (mime, refusal string) {
	switch {
	case isoBrand(head) == "crx ":
		return "image/x-canon-cr3", "camera RAW (Canon CR3) is not supported"
	case bytes.HasPrefix(head, []byte{0, 0, 1, 0xB3}): // a sequence header, where a program stream has a pack header (BA)
		version := "MPEG-1"
		if mpeg2SequenceExtension(head) {
			version = "MPEG-2"
		}
		return "video/mpeg", rawStream(version)
	case bytes.HasPrefix(head, []byte{0, 0, 1, 0xB0}): // visual object sequence
		return "video/mp4v-es", rawStream("MPEG-4")
	}
	return "", ""
}

// rawVideo names an H.264 or HEVC elementary stream (Annex B: start codes, then a parameter set or
// an access unit delimiter), for a head mimetype does not recognise: its type and the refusal's
// sentence, or "" for anything else.
func rawVideo(head []byte) (mime, refusal string) {
	if nal, ok := annexBStart(head); ok {
		switch {
		case nal[0]&0x80 == 0 && (nal[0]&0x1F == 7 || nal[0]&0x1F == 9): // H.264 SPS or access unit delimiter
			return "video/h264", rawStream("H.264")
		case len(nal) > 1 && nal[0]&0x81 == 0 && nal[1] == 1 && (nal[0]>>1 == 32 || nal[0]>>1 == 35): // HEVC VPS or delimiter
			return "video/h265", rawStream("HEVC")
		}
	}
	return "", ""
}

// rawStream is the refusal of a video elementary stream: frames without a container, which the
// demuxer allow-list does not take (transcoder's inputFormats) and which a person fixes by muxing.
func rawStream(codec string) string {
	return "raw " + codec + " video elementary stream is not supported (wrap it in a container)"
}

// isoBrand returns the major brand of an ISO base media file (its first box an ftyp), "" otherwise.
func isoBrand(head []byte) string {
	if len(head) < 12 || string(head[4:8]) != "ftyp" || binary.BigEndian.Uint32(head) < 12 {
		return ""
	}
	return string(head[8:12])
}

// mpeg2SequenceExtension reports whether an elementary stream's head holds a sequence extension
// (start code B5, extension id 1), which MPEG-2 video has right after its sequence header and MPEG-1
// never has.
func mpeg2SequenceExtension(head []byte) bool {
	for i := 4; i+4 < len(head); i++ {
		if head[i] == 0 && head[i+1] == 0 && head[i+2] == 1 && head[i+3] == 0xB5 && head[i+4]>>4 == 1 {
			return true
		}
	}
	return false
}

// annexBStart returns what follows an Annex B start code (00 00 00 01 or 00 00 01) at the start of
// head: the first NAL unit's header, when there is one.
func annexBStart(head []byte) ([]byte, bool) {
	for _, sc := range [][]byte{{0, 0, 0, 1}, {0, 0, 1}} {
		if rest, ok := bytes.CutPrefix(head, sc); ok && len(rest) >= 2 {
			return rest[:2], true
		}
	}
	return nil, false
}
