package transcoder

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// readMP4Info describes an MP4 that this package's ffmpeg wrote (an encode, or a remux of streams the
// input's ffprobe already checked): the duration from the movie header, the first video track's size
// and the codecs from the sample descriptions. It reads only the boxes it needs (the index, first
// thanks to fast start) and is bounded, but it is not meant for uploads: those are described by
// ffprobe, under the tool's resource limits. Reading our own output's header here saves an ffprobe run
// (about 100 ms) per video.
func readMP4Info(path string) (VideoInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return VideoInfo{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return VideoInfo{}, err
	}
	moov, err := findBox(io.NewSectionReader(f, 0, st.Size()), "moov", maxMoovBytes)
	if err != nil {
		return VideoInfo{}, err
	}
	return parseMoov(moov)
}

// maxMoovBytes bounds the index read into memory: an hour at 60 fps indexes in a few MiB.
const maxMoovBytes = 64 << 20

// errNoBox is returned when a box the reader needs is missing.
var errNoBox = errors.New("box not found")

// findBox returns the payload of the first top-level box of type typ in r.
func findBox(r *io.SectionReader, typ string, limit int64) ([]byte, error) {
	var off int64
	for off < r.Size() {
		size, hdr, name, err := boxHeader(r, off)
		if err != nil {
			return nil, err
		}
		if name == typ {
			n := size - hdr
			if n > limit {
				return nil, fmt.Errorf("mp4 %s box is %d bytes, over the %d-byte limit", typ, n, limit)
			}
			buf := make([]byte, n)
			if _, err := r.ReadAt(buf, off+hdr); err != nil {
				return nil, fmt.Errorf("reading mp4 %s box: %w", typ, err)
			}
			return buf, nil
		}
		off += size
	}
	return nil, fmt.Errorf("mp4 %s: %w", typ, errNoBox)
}

// boxHeader reads the box header at off: its total size, header length and type.
func boxHeader(r *io.SectionReader, off int64) (size, hdr int64, typ string, err error) {
	var b [16]byte
	if _, err := r.ReadAt(b[:8], off); err != nil {
		return 0, 0, "", fmt.Errorf("reading mp4 box header at %d: %w", off, err)
	}
	size, hdr, typ = int64(binary.BigEndian.Uint32(b[:4])), 8, string(b[4:8])
	switch size {
	case 0: // to the end of the file
		size = r.Size() - off
	case 1: // 64-bit size follows
		if _, err := r.ReadAt(b[8:16], off+8); err != nil {
			return 0, 0, "", fmt.Errorf("reading mp4 box header at %d: %w", off, err)
		}
		size, hdr = int64(binary.BigEndian.Uint64(b[8:16])), 16
	}
	if size < hdr || size > r.Size()-off {
		return 0, 0, "", fmt.Errorf("mp4 %q box at %d has a bad size %d", typ, off, size)
	}
	return size, hdr, typ, nil
}

// children calls fn for each box in payload, stopping at the first error.
func children(payload []byte, fn func(typ string, body []byte) error) error {
	for len(payload) > 0 {
		if len(payload) < 8 {
			return errors.New("mp4 box header cut off")
		}
		size, hdr := uint64(binary.BigEndian.Uint32(payload[:4])), uint64(8)
		typ := string(payload[4:8])
		switch size {
		case 0:
			size = uint64(len(payload))
		case 1:
			if len(payload) < 16 {
				return errors.New("mp4 box header cut off")
			}
			size, hdr = binary.BigEndian.Uint64(payload[8:16]), 16
		}
		if size < hdr || size > uint64(len(payload)) {
			return fmt.Errorf("mp4 %q box has a bad size %d", typ, size)
		}
		if err := fn(typ, payload[hdr:size]); err != nil {
			return err
		}
		payload = payload[size:]
	}
	return nil
}

// parseMoov reads the movie header and the tracks.
func parseMoov(moov []byte) (VideoInfo, error) {
	info := VideoInfo{Container: "mp4"}
	var sawHeader, sawVideo bool
	err := children(moov, func(typ string, body []byte) error {
		switch typ {
		case "mvhd":
			timescale, duration, err := fullBoxTimes(body)
			if err != nil {
				return fmt.Errorf("reading mvhd: %w", err)
			}
			if timescale > 0 {
				info.Duration = float64(duration) / float64(timescale)
			}
			sawHeader = true
		case "trak":
			t, err := parseTrak(body)
			if err != nil {
				return err
			}
			switch {
			case t.handler == "vide" && !sawVideo:
				sawVideo = true
				info.Width, info.Height, info.VideoCodec = t.width, t.height, t.codec
			case t.handler == "soun" && !info.HasAudio:
				info.HasAudio, info.AudioCodec = true, t.codec
			}
		}
		return nil
	})
	if err != nil {
		return VideoInfo{}, err
	}
	if !sawHeader {
		return VideoInfo{}, fmt.Errorf("mp4 mvhd: %w", errNoBox)
	}
	if !sawVideo {
		return VideoInfo{}, errors.New("the mp4 has no video track")
	}
	return info, nil
}

// fullBoxTimes reads the timescale and duration of an mvhd or mdhd box (versions 0 and 1).
func fullBoxTimes(b []byte) (timescale uint32, duration uint64, err error) {
	if len(b) < 4 {
		return 0, 0, errors.New("cut off")
	}
	switch b[0] {
	case 0: // creation(4) modification(4) timescale(4) duration(4)
		if len(b) < 20 {
			return 0, 0, errors.New("cut off")
		}
		return binary.BigEndian.Uint32(b[12:16]), uint64(binary.BigEndian.Uint32(b[16:20])), nil
	case 1: // creation(8) modification(8) timescale(4) duration(8)
		if len(b) < 32 {
			return 0, 0, errors.New("cut off")
		}
		return binary.BigEndian.Uint32(b[20:24]), binary.BigEndian.Uint64(b[24:32]), nil
	}
	return 0, 0, fmt.Errorf("unknown version %d", b[0])
}

type trackInfo struct {
	handler       string // "vide", "soun", ...
	codec         string // "h264", "aac" or the sample entry's four characters
	width, height int    // coded frame size, from a video sample entry
}

// parseTrak reads a track's handler and first sample description: the codec and, for video, the
// coded frame size. (Not the track header's size: that is the display size, scaled by the pixel
// aspect ratio and truncated, e.g. 853 for an anamorphic 720×480, where ffprobe and players' decoders
// report the 720 the frames have.)
func parseTrak(trak []byte) (trackInfo, error) {
	var t trackInfo
	err := children(trak, func(typ string, body []byte) error {
		switch typ {
		case "mdia":
			return children(body, func(typ string, body []byte) error {
				switch typ {
				case "hdlr": // version/flags(4) pre_defined(4) handler_type(4)
					if len(body) < 12 {
						return errors.New("reading hdlr: cut off")
					}
					t.handler = string(body[8:12])
				case "minf":
					return children(body, func(typ string, body []byte) error {
						if typ != "stbl" {
							return nil
						}
						return children(body, func(typ string, body []byte) error {
							if typ != "stsd" {
								return nil
							}
							// version/flags(4) entry_count(4), then the first entry's size(4) type(4)
							// and, for a visual sample entry, reserved(6) data_reference_index(2)
							// pre_defined(2) reserved(2) pre_defined(12) width(2) height(2).
							if len(body) < 16 {
								return errors.New("reading stsd: cut off")
							}
							t.codec = codecName(string(body[12:16]))
							if t.handler == "vide" {
								if len(body) < 44 {
									return errors.New("reading stsd: visual sample entry cut off")
								}
								t.width = int(binary.BigEndian.Uint16(body[40:42]))
								t.height = int(binary.BigEndian.Uint16(body[42:44]))
							}
							return nil
						})
					})
				}
				return nil
			})
		}
		return nil
	})
	return t, err
}

// codecName maps a sample entry to ffprobe's codec name for the codecs our encodes contain.
func codecName(fourcc string) string {
	switch fourcc {
	case "avc1", "avc3":
		return "h264"
	case "mp4a":
		return "aac"
	}
	return fourcc
}

// cutBeforeIndexMsg is the refusal of an MP4 whose upload stopped before its index.
const cutBeforeIndexMsg = "video is truncated: the MP4 file ends before its index (was the upload cut short?)"

// maxTopLevelBoxes bounds cutBeforeIndex's walk: a real file has a handful of top-level boxes (a
// fragmented one a few thousand); a file of tiny boxes ends the walk as not cut.
const maxTopLevelBoxes = 100_000

// cutBeforeIndex reports whether the file at path is an MP4/MOV that ends before its index is whole:
// it starts like one (an ftyp box, or the wide, free, skip or mdat of older QuickTime files), its
// top-level boxes run to the end of the file, the last one cut off or complete, and it holds media
// data (mdat) without a whole moov box, or ends inside its moov. Recorders and most muxers write the
// index after the media; an upload cut short then loses it, and ffprobe can read nothing (or, cut
// inside the index, the tracks before the cut). (A fragmented MP4 has its moov before the fragments;
// a media segment alone starts with styp or moof; a HEIF image keeps its items in a meta box: none of
// them is called cut.)
//
// It runs on uploads whose probe failed (ffprobe refused the file, or found no video stream in it): it
// reads box headers only (8 or 16 bytes each, never a payload), at most maxTopLevelBoxes of them.
func cutBeforeIndex(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false
	}
	size := st.Size()
	var (
		off  int64
		mdat bool
		b    [16]byte
	)
	for n := 0; off < size; n++ {
		if n == maxTopLevelBoxes {
			return false
		}
		got, _ := f.ReadAt(b[:], off)
		if got < 8 {
			break // a header cut off
		}
		boxSize, hdr, typ := int64(binary.BigEndian.Uint32(b[:4])), int64(8), string(b[4:8])
		switch {
		case !isBoxType(typ):
			return false // not boxes: something else is wrong with the file
		case n == 0 && typ != "ftyp" && typ != "wide" && typ != "free" && typ != "skip" && typ != "mdat":
			return false
		case typ == "meta":
			return false
		}
		mdat = mdat || typ == "mdat"
		switch boxSize {
		case 0: // to the end of the file: a recording whose index was never written
			boxSize = size - off
		case 1:
			if got < 16 {
				return mdat
			}
			boxSize, hdr = int64(binary.BigEndian.Uint64(b[8:16])), 16
		}
		switch {
		case boxSize < hdr:
			return false
		case boxSize > size-off:
			return mdat || typ == "moov" // cut inside this box: the index is not whole
		case typ == "moov":
			return false // a whole index: whatever ffprobe refused, it is not this
		}
		off += boxSize
	}
	return mdat
}

// isBoxType reports whether typ looks like a box type: four printable ASCII characters.
func isBoxType(typ string) bool {
	for i := 0; i < len(typ); i++ {
		if typ[i] < 0x20 || typ[i] > 0x7e {
			return false
		}
	}
	return len(typ) == 4
}
