package transcoder

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Metadata (EXIF, XMP, ICC profiles, comments, text chunks, tags) is bounded before any decoder sees
// the file, as pixels are: the decoders read it into memory whole and libvips copies it again into the
// image's fields, whatever the size of the picture. Measured with libvips 8.14 on a 640×480 picture:
// 250 MB of JPEG APP1 segments took a worker from 36 MB to 597 MB (vips alone to 808 MB), a 250 MB
// PNG tEXt chunk took vips to 1.5 GB and a 250 MB TIFF XMP tag to 2.8 GB and 42 s.
//
// The walk reads the headers of segments, chunks, boxes and tags and seeks past their payloads, so
// it costs a few reads however much a file carries. JPEG's entropy-coded data and GIF's sub-blocks
// are read through in a small buffer: the markers after a scan and the size of an extension can only
// be found that way, and it runs at memory speed. Only bytes the file really holds are counted, so a
// truncated file whose last chunk claims 2 GB is not called a metadata bomb: its decoder reports the
// truncation. Each walk stops quietly where the structure stops making sense, for the same reason.

// maxMetadataSegments caps how many metadata segments (chunks, items, extensions) an image may carry
// whatever their size: libjpeg appends each APPn marker it keeps to the end of a list it walks every
// time, so decoding costs the square of their number (measured: 16,384 empty APP1 segments 0.5 s of
// CPU, 65,536 of them 19 s, 4 million more than 10 minutes, in a 16 MB file). Real files carry a
// handful; an ICC profile split over JPEG segments takes at most 255, 16 MiB of extended XMP about 256.
const maxMetadataSegments = 1000

// metadataTally is what a walk found: the bytes of metadata the file holds and in how many pieces.
type metadataTally struct {
	bytes    int64
	segments int
	unit     string // what a piece is called in the format: "segments", "chunks", "items", ...
}

func (t *metadataTally) add(n int64) {
	t.bytes += n
	t.segments++
}

// errStructure ends a walk where the file stops making sense; the decoder has the last word on it.
var errStructure = errors.New("the file's structure ends here")

// CheckMetadata refuses the image at srcPath, as TransformRecipe would, when it carries more metadata
// than ImageConfig.MaxMetadataBytes or more segments than maxMetadataSegments; nil for an image within
// the limits or a file it does not know. It reads structure only, so a caller runs it before anything
// that opens the image with a decoder, a header read included: libjpeg's header read alone keeps every
// APPn segment it meets (EstimateMemory's vips.ReadHeader on the 250 MB APP1 JPEG took the worker from
// 38 MB to 371 MB before the transform refused it).
func (im *Images) CheckMetadata(srcPath string) error {
	return im.checkMetadata(srcPath, sniffImage(srcPath))
}

// checkMetadata refuses an image carrying more metadata than ImageConfig.MaxMetadataBytes, or more
// metadata segments than maxMetadataSegments, before any decoder reads it.
func (im *Images) checkMetadata(path string, sn sniffedImage) error {
	t, err := measureMetadata(path, sn.Format)
	if err != nil {
		return internal("reading the image's structure", err)
	}
	const what = "metadata (EXIF, XMP, colour profiles, comments)"
	if t.bytes > im.cfg.MaxMetadataBytes {
		return &Error{BadInput: true,
			Msg: fmt.Sprintf("image carries %s of %s; at most %s is accepted: remove the metadata and upload it again",
				byteSize(t.bytes), what, byteSize(im.cfg.MaxMetadataBytes)),
			Detail: fmt.Sprintf("the %s file holds %d bytes of metadata in %d %s; the limit is transcoder.ImageConfig.MaxMetadataBytes (%d)",
				sn.Format, t.bytes, t.segments, t.unit, im.cfg.MaxMetadataBytes)}
	}
	if t.segments > maxMetadataSegments {
		return &Error{BadInput: true,
			Msg: fmt.Sprintf("image carries %d %s of %s; at most %d are accepted: remove the metadata and upload it again",
				t.segments, t.unit, what, maxMetadataSegments),
			Detail: fmt.Sprintf("the %s file holds %d bytes of metadata in %d %s", sn.Format, t.bytes, t.segments, t.unit)}
	}
	return nil
}

// measureMetadata walks the image at path, sniffed as format, and tallies its metadata. Formats it
// does not know tally nothing. Only a failure to read the file is an error.
func measureMetadata(path, format string) (metadataTally, error) {
	f, err := os.Open(path)
	if err != nil {
		return metadataTally{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return metadataTally{}, err
	}
	w := &walker{r: f, size: st.Size(), buf: make([]byte, walkBuffer)}
	var t metadataTally
	switch format {
	case "JPEG":
		t.unit = "segments"
		err = jpegMetadata(w, &t)
	case "PNG":
		t.unit = "chunks"
		err = pngMetadata(w, &t)
	case "WebP":
		t.unit = "chunks"
		err = webpMetadata(w, &t)
	case "GIF":
		t.unit = "extensions"
		err = gifMetadata(w, &t)
	case "HEIF", "AVIF":
		t.unit = "items"
		err = bmffMetadata(w, &t)
	case "TIFF":
		t.unit = "tags"
		err = tiffMetadata(f, st.Size(), &t)
	}
	if errors.Is(err, errStructure) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return t, err
}

// jpegMetadata tallies the APPn and COM segments of a JPEG up to its EOI (what follows EOI, such as
// the further pictures of an MPF file, is never decoded). Markers are found as libjpeg finds them:
// anything up to a 0xFF is skipped (entropy-coded data, or stray bytes libjpeg warns about), then
// 0xFF fill bytes; 0xFF00 (a stuffed byte), RSTn, TEM and SOI stand alone. So the segments between
// the scans of a progressive JPEG, which the decoder keeps too, are counted.
func jpegMetadata(w *walker, t *metadataTally) error {
	if err := w.skip(2); err != nil { // SOI
		return err
	}
	for {
		if err := w.skipTo(0xFF); err != nil {
			return err
		}
		if err := w.skipRun(0xFF); err != nil {
			return err
		}
		b, err := w.next(1)
		if err != nil {
			return err
		}
		m := b[0]
		switch {
		case m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8):
			continue
		case m == 0xD9: // EOI
			return nil
		}
		h, err := w.next(2)
		if err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint16(h)) - 2
		if n < 0 {
			return errStructure
		}
		if (m >= 0xE0 && m <= 0xEF) || m == 0xFE {
			t.add(w.held(n))
		}
		if err := w.skip(n); err != nil {
			return err
		}
	}
}

// pngPixelChunks are the PNG chunks that make the picture (and APNG's frames); every other chunk,
// standard (tEXt, zTXt, iTXt, iCCP, eXIf, ...) or private, is metadata.
var pngPixelChunks = map[string]bool{
	"IHDR": true, "PLTE": true, "IDAT": true, "IEND": true, "tRNS": true,
	"acTL": true, "fcTL": true, "fdAT": true,
}

// pngMetadata tallies the metadata chunks of a PNG up to its IEND (text chunks after the pixels are
// read too).
func pngMetadata(w *walker, t *metadataTally) error {
	if err := w.skip(8); err != nil { // the signature
		return err
	}
	for {
		h, err := w.next(8)
		if err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(h[0:4]))
		typ := string(h[4:8])
		if n > 1<<31-1 { // PNG's own bound on a chunk
			return errStructure
		}
		if !pngPixelChunks[typ] {
			t.add(w.held(n))
		}
		if typ == "IEND" {
			return nil
		}
		if err := w.skip(n + 4); err != nil { // data and CRC
			return err
		}
	}
}

// webpPixelChunks are the RIFF chunks of a WebP that make the picture or the animation; every other
// chunk (ICCP, EXIF, "XMP ", unknown ones) is metadata.
var webpPixelChunks = map[string]bool{
	"VP8 ": true, "VP8L": true, "VP8X": true, "ALPH": true, "ANIM": true, "ANMF": true,
}

// webpMetadata tallies the metadata chunks of a WebP within its RIFF size.
func webpMetadata(w *walker, t *metadataTally) error {
	h, err := w.next(12)
	if err != nil {
		return err
	}
	end := 8 + int64(binary.LittleEndian.Uint32(h[4:8]))
	for w.offset()+8 <= end {
		c, err := w.next(8)
		if err != nil {
			return err
		}
		typ := string(c[0:4])
		n := int64(binary.LittleEndian.Uint32(c[4:8]))
		if !webpPixelChunks[typ] {
			t.add(w.held(n))
		}
		if err := w.skip(n + n&1); err != nil { // chunks are padded to an even size
			return err
		}
	}
	return nil
}

// gifMetadata tallies a GIF's comment, plain-text and application extensions other than the loop
// count (NETSCAPE2.0, ANIMEXTS1.0): XMP and ICC profiles travel in application extensions.
func gifMetadata(w *walker, t *metadataTally) error {
	h, err := w.next(13) // header and logical screen descriptor
	if err != nil {
		return err
	}
	if err := w.skip(colourTable(h[10])); err != nil {
		return err
	}
	for {
		b, err := w.next(1)
		if err != nil {
			return err
		}
		switch b[0] {
		case 0x3B: // trailer
			return nil
		case 0x2C: // an image: descriptor, local colour table, LZW code size, data
			d, err := w.next(9)
			if err != nil {
				return err
			}
			if err := w.skip(colourTable(d[8]) + 1); err != nil {
				return err
			}
			if _, err := gifSubBlocks(w); err != nil {
				return err
			}
		case 0x21: // an extension
			l, err := w.next(1)
			if err != nil {
				return err
			}
			label := l[0]
			metadata := label == 0xFE || label == 0x01
			if label == 0xFF {
				id, err := w.peek(12)
				if err != nil {
					return err
				}
				app := string(id[1:12])
				metadata = app != "NETSCAPE2.0" && app != "ANIMEXTS1.0"
			}
			n, err := gifSubBlocks(w)
			if err != nil {
				return err
			}
			if metadata {
				t.add(n)
			}
		default:
			return errStructure
		}
	}
}

// colourTable is the size of the colour table a GIF descriptor's packed flags declare.
func colourTable(flags byte) int64 {
	if flags&0x80 == 0 {
		return 0
	}
	return 3 << (flags&7 + 1)
}

// gifSubBlocks skips a chain of GIF data sub-blocks and returns the bytes they held.
func gifSubBlocks(w *walker) (int64, error) {
	var total int64
	for {
		b, err := w.next(1)
		if err != nil {
			return total, err
		}
		if b[0] == 0 {
			return total, nil
		}
		total += w.held(int64(b[0]))
		if err := w.skip(int64(b[0])); err != nil {
			return total, err
		}
	}
}

// walkBuffer is the walker's buffer: big enough that JPEG's entropy-coded data and GIF's sub-blocks
// are read in few calls, small enough to cost nothing beside a decoder.
const walkBuffer = 64 << 10

// walker reads a file's structure forwards: small reads come from its buffer, and a skip past the
// buffer is a seek, so a payload that is skipped is never read.
type walker struct {
	r    io.ReadSeeker
	size int64 // of what r reads
	buf  []byte
	lo   int   // buf[lo:hi] is buffered and not yet consumed
	hi   int   //
	pos  int64 // r's offset, where buf[hi] would be read from
}

// offset is where the walk is: the file offset of the next byte next would return.
func (w *walker) offset() int64 { return w.pos - int64(w.hi-w.lo) }

// held is how much of n bytes from the current offset the file really holds.
func (w *walker) held(n int64) int64 { return max(0, min(n, w.size-w.offset())) }

// fill buffers at least n bytes (n ≤ walkBuffer); io.ErrUnexpectedEOF when the file ends first.
func (w *walker) fill(n int) error {
	if w.hi-w.lo >= n {
		return nil
	}
	w.hi = copy(w.buf, w.buf[w.lo:w.hi])
	w.lo = 0
	for w.hi < n {
		k, err := w.r.Read(w.buf[w.hi:])
		w.hi += k
		w.pos += int64(k)
		if err == io.EOF || (err == nil && k == 0) {
			if w.hi < n {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// peek returns the next n bytes without consuming them; the slice is valid until the next call.
func (w *walker) peek(n int) ([]byte, error) {
	if err := w.fill(n); err != nil {
		return nil, err
	}
	return w.buf[w.lo : w.lo+n], nil
}

// next returns and consumes the next n bytes; the slice is valid until the next call.
func (w *walker) next(n int) ([]byte, error) {
	b, err := w.peek(n)
	if err == nil {
		w.lo += n
	}
	return b, err
}

// skip moves n bytes forward, seeking past what is not buffered.
func (w *walker) skip(n int64) error {
	if n < 0 {
		return errStructure
	}
	if buffered := int64(w.hi - w.lo); n <= buffered {
		w.lo += int(n)
		return nil
	}
	n -= int64(w.hi - w.lo)
	w.lo, w.hi = 0, 0
	pos, err := w.r.Seek(n, io.SeekCurrent)
	if err != nil {
		return err
	}
	w.pos = pos
	if pos > w.size {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// seekTo moves to offset off (a box's end, say), back too: a box whose entries overran it is left
// at its declared end.
func (w *walker) seekTo(off int64) error {
	if off >= w.offset() {
		return w.skip(off - w.offset())
	}
	if off < 0 {
		return errStructure
	}
	w.lo, w.hi = 0, 0
	pos, err := w.r.Seek(off, io.SeekStart)
	w.pos = pos
	return err
}

// skipTo moves forward to the next byte c, reading through the file.
func (w *walker) skipTo(c byte) error {
	for {
		if i := bytes.IndexByte(w.buf[w.lo:w.hi], c); i >= 0 {
			w.lo += i
			return nil
		}
		w.lo = w.hi
		if err := w.fill(1); err != nil {
			return err
		}
	}
}

// skipRun moves past a run of bytes c (JPEG's 0xFF before a marker and its fill bytes).
func (w *walker) skipRun(c byte) error {
	for {
		for w.lo < w.hi && w.buf[w.lo] == c {
			w.lo++
		}
		if w.lo < w.hi {
			return nil
		}
		if err := w.fill(1); err != nil {
			return err
		}
	}
}

// byteSize says a size for people: "250 MiB", "16.5 MiB", "300 KiB", "12 bytes".
func byteSize(n int64) string {
	unit := func(n int64, shift uint, name string) string {
		v := float64(n) / float64(int64(1)<<shift)
		if n%(1<<shift) == 0 || v >= 100 {
			return fmt.Sprintf("%.0f %s", v, name)
		}
		return fmt.Sprintf("%.1f %s", v, name)
	}
	switch {
	case n >= 1<<30:
		return unit(n, 30, "GiB")
	case n >= 1<<20:
		return unit(n, 20, "MiB")
	case n >= 1<<10:
		return unit(n, 10, "KiB")
	}
	return fmt.Sprintf("%d bytes", n)
}
