package transcoder

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
)

// The metadata walks of the formats whose structure points elsewhere in the file: HEIF and AVIF
// (ISO base media boxes; metadata items whose data iloc locates) and TIFF (tags whose values sit at
// offsets). See image_metadata.go for why and how.

// Bounds libheif 1.15 itself sets (security_limits.h): a file beyond them is refused by libheif, so
// the walk stops there rather than build tables for it.
const (
	maxHEIFItems   = 20_000
	maxHEIFExtents = 32
)

// heifMetadataItems are the item types libvips reads as metadata: EXIF, XMP (a "mime" item) and
// other MIME or URI-typed blocks.
var heifMetadataItems = map[string]bool{"Exif": true, "mime": true, "uri ": true}

// bmffMetadata tallies a HEIF or AVIF file's metadata: the data of its Exif, mime and uri items
// (located by iloc, typed by iinf, in whichever order the two come) and its ICC colour profiles
// (colr properties of type prof or rICC).
func bmffMetadata(w *walker, t *metadataTally) error {
	items := map[uint32]bool{}    // metadata item IDs, from iinf
	lengths := map[uint32]int64{} // bytes each item's extents hold, from iloc
	defer func() {
		for id := range items {
			t.add(lengths[id])
		}
	}()
	for {
		typ, body, end, err := w.box(w.size)
		if err != nil {
			return err
		}
		if typ == "meta" {
			if err := w.seekTo(body + 4); err != nil { // version and flags
				return err
			}
			if err := heifMeta(w, end, items, lengths, t); err != nil && !errors.Is(err, errStructure) {
				return err
			}
		}
		if err := w.seekTo(end); err != nil {
			return err
		}
	}
}

// heifMeta walks the children of the file's meta box up to end. A child that makes no sense inside
// is left at its end, and the walk goes on with the next: libheif reads a box's declared entries and
// skips the rest, so bytes a walk stops at must not hide the boxes after them.
func heifMeta(w *walker, end int64, items map[uint32]bool, lengths map[uint32]int64, t *metadataTally) error {
	for w.offset() < end {
		typ, _, boxEnd, err := w.box(end)
		if err != nil {
			return err
		}
		switch typ {
		case "iinf":
			err = heifItemInfos(w, boxEnd, items)
		case "iloc":
			err = heifLocations(w, lengths)
		case "iprp":
			err = heifProfiles(w, boxEnd, t)
		}
		if err != nil && !errors.Is(err, errStructure) {
			return err
		}
		if err := w.seekTo(boxEnd); err != nil {
			return err
		}
	}
	return nil
}

// heifItemInfos reads iinf's infe boxes, as many as it declares, and notes the metadata items' IDs.
func heifItemInfos(w *walker, end int64, items map[uint32]bool) error {
	v, err := w.next(4)
	if err != nil {
		return err
	}
	count, err := w.uint(2 + 2*min(int(v[0]), 1)) // 16 bits in version 0, 32 after
	if err != nil {
		return err
	}
	if count > maxHEIFItems {
		return errStructure
	}
	for range count {
		typ, _, boxEnd, err := w.box(end)
		if err != nil {
			return err
		}
		if typ == "infe" {
			h, err := w.next(4)
			if err != nil {
				return err
			}
			// Versions 0 and 1 carry no item type; 2 has a 16-bit item ID, 3 a 32-bit one.
			switch h[0] {
			case 2:
				b, err := w.next(8)
				if err != nil {
					return err
				}
				if heifMetadataItems[string(b[4:8])] {
					items[uint32(binary.BigEndian.Uint16(b[0:2]))] = true
				}
			case 3:
				b, err := w.next(10)
				if err != nil {
					return err
				}
				if heifMetadataItems[string(b[6:10])] {
					items[binary.BigEndian.Uint32(b[0:4])] = true
				}
			}
		}
		if err := w.seekTo(boxEnd); err != nil {
			return err
		}
	}
	return nil
}

// heifLocations reads iloc and adds up the bytes of each item's extents that the file holds.
func heifLocations(w *walker, lengths map[uint32]int64) error {
	h, err := w.next(6)
	if err != nil {
		return err
	}
	version := h[0]
	offsetSize, lengthSize := int(h[4]>>4), int(h[4]&15)
	baseSize, indexSize := int(h[5]>>4), 0
	if version == 1 || version == 2 {
		indexSize = int(h[5] & 15)
	}
	var count uint32
	if version < 2 {
		b, err := w.next(2)
		if err != nil {
			return err
		}
		count = uint32(binary.BigEndian.Uint16(b))
	} else {
		b, err := w.next(4)
		if err != nil {
			return err
		}
		count = binary.BigEndian.Uint32(b)
	}
	if count > maxHEIFItems {
		return errStructure
	}
	for range count {
		id, err := w.uint(2 + 2*int(version/2)) // 32-bit IDs from version 2 on
		if err != nil {
			return err
		}
		if version == 1 || version == 2 {
			if err := w.skip(2); err != nil { // construction method
				return err
			}
		}
		if err := w.skip(2); err != nil { // data reference index
			return err
		}
		base, err := w.uint(baseSize)
		if err != nil {
			return err
		}
		extents, err := w.uint(2)
		if err != nil {
			return err
		}
		if extents > maxHEIFExtents {
			return errStructure
		}
		for range extents {
			if err := w.skip(int64(indexSize)); err != nil {
				return err
			}
			off, err := w.uint(offsetSize)
			if err != nil {
				return err
			}
			n, err := w.uint(lengthSize)
			if err != nil {
				return err
			}
			if off += base; off < uint64(w.size) {
				lengths[uint32(id)] += int64(min(n, uint64(w.size)-off))
			}
		}
	}
	return nil
}

// heifProfiles tallies the ICC profiles among the item properties (iprp's ipco).
func heifProfiles(w *walker, end int64, t *metadataTally) error {
	for w.offset() < end {
		typ, _, boxEnd, err := w.box(end)
		if err != nil {
			return err
		}
		if typ == "ipco" {
			for seen := 0; w.offset() < boxEnd; seen++ {
				if seen >= maxHEIFItems {
					return errStructure
				}
				ptyp, body, pEnd, err := w.box(boxEnd)
				if err != nil {
					return err
				}
				if ptyp == "colr" {
					c, err := w.next(4)
					if err != nil {
						return err
					}
					if s := string(c); s == "prof" || s == "rICC" {
						t.add(w.held(pEnd - body - 4))
					}
				}
				if err := w.seekTo(pEnd); err != nil {
					return err
				}
			}
		}
		if err := w.seekTo(boxEnd); err != nil {
			return err
		}
	}
	return nil
}

// box reads the header of the ISO base media box at the walk's offset, which must end by end, and
// returns its type and where its body starts and it ends.
func (w *walker) box(end int64) (typ string, body, boxEnd int64, err error) {
	start := w.offset()
	if end-start < 8 {
		return "", 0, 0, errStructure
	}
	h, err := w.next(8)
	if err != nil {
		return "", 0, 0, err
	}
	typ = string(h[4:8])
	size := int64(binary.BigEndian.Uint32(h[0:4]))
	body = start + 8
	switch size {
	case 0: // to the end of what holds it
		size = end - start
	case 1: // a 64-bit size follows
		big, err := w.uint(8)
		if err != nil {
			return "", 0, 0, err
		}
		if big > uint64(end-start) {
			return "", 0, 0, errStructure
		}
		size, body = int64(big), start+16
	}
	if size < body-start || size > end-start {
		return "", 0, 0, errStructure
	}
	return typ, body, start + size, nil
}

// uint reads an n-byte big-endian unsigned integer (n is 0, 2, 4 or 8; 0 reads nothing and is 0).
func (w *walker) uint(n int) (uint64, error) {
	if n == 0 {
		return 0, nil
	}
	b, err := w.next(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	case 8:
		return binary.BigEndian.Uint64(b), nil
	}
	return 0, errStructure
}

// tiffTypeSizes are the sizes of TIFF's field types (BigTIFF's 16-18 included); libtiff ignores
// fields of other types.
var tiffTypeSizes = map[uint16]uint64{
	1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4,
	16: 8, 17: 8, 18: 8,
}

// tiffMetadata tallies the tag data of a TIFF's first directory: libtiff reads every tag's value of
// the directory it opens into memory (XMP, IPTC, ICC profiles, Photoshop's resources, and private
// tags alike), and libvips opens only the first page. Later pages' tags are never read.
func tiffMetadata(f *os.File, size int64, t *metadataTally) error {
	h := make([]byte, 16)
	if _, err := f.ReadAt(h, 0); err != nil {
		return err
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if h[0] == 'M' {
		bo = binary.BigEndian
	}
	big := bo.Uint16(h[2:4]) == 43
	entrySize, countSize := int64(12), 2
	ifd := uint64(bo.Uint32(h[4:8]))
	if big {
		entrySize, countSize = 20, 8
		ifd = bo.Uint64(h[8:16])
	}
	if ifd >= uint64(size) {
		return errStructure
	}
	w := &walker{r: io.NewSectionReader(f, int64(ifd), size-int64(ifd)), size: size - int64(ifd), buf: make([]byte, walkBuffer)}
	c, err := w.next(countSize)
	if err != nil {
		return err
	}
	count := uint64(bo.Uint16(c))
	if big {
		count = bo.Uint64(c)
	}
	if count > 1<<16 { // libtiff's own bound on a BigTIFF directory is lower still
		return errStructure
	}
	inline := uint64(entrySize - 8) // 4 bytes of value in a TIFF entry, 8 in a BigTIFF one
	for range count {
		e, err := w.next(int(entrySize))
		if err != nil {
			return err
		}
		typ := bo.Uint16(e[2:4])
		var n, off uint64
		if big {
			n, off = bo.Uint64(e[4:12]), bo.Uint64(e[12:20])
		} else {
			n, off = uint64(bo.Uint32(e[4:8])), uint64(bo.Uint32(e[8:12]))
		}
		per := tiffTypeSizes[typ]
		if per == 0 {
			continue
		}
		if n > uint64(size) { // more than the file could hold, and no overflow below
			n = uint64(size)
		}
		held := n * per
		switch {
		case held <= inline: // in the entry itself
		case off >= uint64(size):
			held = 0
		default:
			held = min(held, uint64(size)-off)
		}
		t.add(int64(held))
	}
	return nil
}
