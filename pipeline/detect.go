package pipeline

import (
	"fmt"

	"github.com/gabriel-vasile/mimetype"
)

// MediaKind is what a job transforms: an image or a video.
type MediaKind string

const (
	Image MediaKind = "image"
	Video MediaKind = "video"
)

// Content types we transform, by what the bytes say (never the key's extension). Anything else is a
// permanent "unsupported media type".
var (
	imageTypes = map[string]bool{
		"image/jpeg": true, "image/png": true, "image/webp": true, "image/gif": true,
		"image/heic": true, "image/heif": true, "image/heic-sequence": true, "image/heif-sequence": true,
		"image/avif": false, // libvips' heif loader could read it, but it was not asked for
		"image/tiff": true,
	}
	videoTypes = map[string]bool{
		"video/mp4": true, "video/quicktime": true, "video/webm": true, "video/x-matroska": true,
		"video/3gpp": true, "video/3gpp2": true, "video/x-m4v": true, "audio/mp4": false,
	}
)

// Detect sniffs a file's content and says whether it is an image or a video we can transform.
func Detect(path string) (mime string, kind MediaKind, err error) {
	m, err := mimetype.DetectFile(path)
	if err != nil {
		return "", "", transient("detecting", fmt.Errorf("reading file: %w", err))
	}
	for t := m; t != nil; t = t.Parent() {
		switch {
		case imageTypes[t.String()]:
			return t.String(), Image, nil
		case videoTypes[t.String()]:
			return t.String(), Video, nil
		}
	}
	return m.String(), "", permanent("detecting", fmt.Errorf("unsupported media type: %s", m.String()))
}

// SniffBytes is how much of an upload DetectBytes looks at: all that mimetype reads.
const SniffBytes = 4096

// DetectBytes is Detect on an upload's first bytes, the same table: triage sniffs the kind from a
// ranged read before the job is routed to its lane.
func DetectBytes(head []byte) (mime string, kind MediaKind, err error) {
	m := mimetype.Detect(head)
	for t := m; t != nil; t = t.Parent() {
		switch {
		case imageTypes[t.String()]:
			return t.String(), Image, nil
		case videoTypes[t.String()]:
			return t.String(), Video, nil
		}
	}
	return m.String(), "", permanent("detecting", fmt.Errorf("unsupported media type: %s", m.String()))
}
