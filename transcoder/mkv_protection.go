package transcoder

import (
	"io"
	"os"
)

// Encrypted Matroska and WebM tracks (WebM's Common Encryption, Matroska's ContentEncryption): as
// with an encrypted MP4 (mp4_content.go), ffmpeg demuxes their ciphertext as frames. A track says so
// in its header, before any cluster: TrackEntry → ContentEncodings → ContentEncoding, whose
// ContentEncodingType is 1 (encryption) or which holds a ContentEncryption element.

// EBML element IDs (with their length markers, as they appear in the file).
const (
	ebmlHeader          = 0x1A45DFA3
	mkvSegment          = 0x18538067
	mkvTracks           = 0x1654AE6B
	mkvTrackEntry       = 0xAE
	mkvContentEncodings = 0x6D80
	mkvContentEncoding  = 0x6240
	mkvEncodingType     = 0x5033
	mkvContentEncrypt   = 0x5035
	mkvCluster          = 0x1F43B675
)

// maxMatroskaElements bounds the elements matroskaProtected reads the headers of.
const maxMatroskaElements = 10_000

// matroskaProtected reports whether the Matroska or WebM file at path declares an encrypted track.
func matroskaProtected(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false
	}
	m := &ebmlReader{r: f}
	id, _, next, ok := m.element(0, st.Size())
	if !ok || id != ebmlHeader {
		return false
	}
	id, body, end, ok := m.element(next, st.Size())
	if !ok || id != mkvSegment {
		return false
	}
	protected := false
	m.walk(body, end, func(id uint32, body, end int64) bool {
		switch id {
		case mkvCluster:
			return false // the track headers come before the media
		case mkvTracks:
			m.walk(body, end, func(id uint32, body, end int64) bool {
				if id != mkvTrackEntry {
					return true
				}
				m.walk(body, end, func(id uint32, body, end int64) bool {
					if id != mkvContentEncodings {
						return true
					}
					m.walk(body, end, func(id uint32, body, end int64) bool {
						if id != mkvContentEncoding {
							return true
						}
						m.walk(body, end, func(id uint32, body, end int64) bool {
							switch {
							case id == mkvContentEncrypt:
								protected = true
							case id == mkvEncodingType && end-body == 1:
								var b [1]byte
								if _, err := m.r.ReadAt(b[:], body); err == nil && b[0] == 1 {
									protected = true
								}
							}
							return !protected
						})
						return !protected
					})
					return !protected
				})
				return !protected
			})
			return false
		}
		return true
	})
	return protected
}

type ebmlReader struct {
	r        io.ReaderAt
	elements int
}

// walk calls fn for each element between start and end, until fn returns false or a header makes
// no sense.
func (m *ebmlReader) walk(start, end int64, fn func(id uint32, body, end int64) bool) {
	for off := start; off < end; {
		id, body, next, ok := m.element(off, end)
		if !ok || !fn(id, body, next) {
			return
		}
		off = next
	}
}

// element reads the header of the element at off (which must end by end): its ID, where its body
// starts and where it ends (end, for an element of unknown size or one cut short).
func (m *ebmlReader) element(off, end int64) (id uint32, body, next int64, ok bool) {
	if m.elements++; m.elements > maxMatroskaElements {
		return 0, 0, 0, false
	}
	var b [12]byte
	n, _ := m.r.ReadAt(b[:], off)
	idLen := vintLen(b[0])
	if idLen == 0 || idLen > 4 || n < idLen+1 {
		return 0, 0, 0, false
	}
	for _, c := range b[:idLen] {
		id = id<<8 | uint32(c)
	}
	sizeLen := vintLen(b[idLen])
	if sizeLen == 0 || n < idLen+sizeLen {
		return 0, 0, 0, false
	}
	size := uint64(b[idLen]) & (0xFF >> sizeLen)
	unknown := size == 0xFF>>sizeLen
	for _, c := range b[idLen+1 : idLen+sizeLen] {
		size = size<<8 | uint64(c)
		unknown = unknown && c == 0xFF
	}
	body = off + int64(idLen+sizeLen)
	if unknown || size > uint64(end-body) {
		return id, body, end, body <= end
	}
	return id, body, body + int64(size), true
}

// vintLen is the length of the EBML variable-size integer whose first byte is b: 1 to 8, or 0 for
// a byte no integer starts with.
func vintLen(b byte) int {
	for i := range 8 {
		if b&(0x80>>i) != 0 {
			return i + 1
		}
	}
	return 0
}
