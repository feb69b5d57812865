package transcoder

import (
	"encoding/binary"
	"errors"
	"os"
	"slices"
)

// What a HEIF or AVIF file's meta box says about its primary picture: how it is coded (the item's
// type, and whether its data is compressed on top of that) and its colour description (an nclx colr
// property), which libvips does not tell. Read from the meta box alone, before any decoder.

// heifPrimary describes a HEIF file's primary item.
type heifPrimary struct {
	itemType string // "hvc1", "av01", "grid", "unci", "j2k1", ...; "" when iinf does not name it
	// codings are the item types its pixels are coded in: its own, or for a derived picture (grid,
	// iden, iovl) those of the items it is made of (iref dimg).
	codings    []string
	compressed bool  // a generic compression property (cmpC or icef: deflate, zlib, brotli) on any of them
	nclx       *cicp // its colr nclx property; nil when it has none
}

// readHEIFPrimary reads the meta box of the HEIF file at path (at most maxParsedBoxBytes of it);
// ok is false when there is none or it makes no sense.
func readHEIFPrimary(path string) (heifPrimary, bool) {
	f, err := os.Open(path)
	if err != nil {
		return heifPrimary{}, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return heifPrimary{}, false
	}
	r := &mp4Reader{r: f, size: st.Size()}
	var meta []byte
	n := 0
	r.walk(0, r.size, func(typ string, body, end int64) bool {
		if typ == "meta" {
			meta = r.body(body, end)
			return false
		}
		n++
		return n < 16 // the meta box of an image comes right after its ftyp
	})
	if meta == nil {
		return heifPrimary{}, false
	}
	p, err := parseHEIFMeta(meta)
	return p, err == nil
}

var errHEIFMeta = errors.New("heif meta box makes no sense")

// HEIFPrimaryCoding is parseHEIFMeta for package pipeline's detection, which reads a file's first
// bytes: the primary item's type and whether it is compressed, from the body of a meta box.
func HEIFPrimaryCoding(metaBody []byte) (itemType string, compressed bool, ok bool) {
	p, err := parseHEIFMeta(metaBody)
	if err != nil {
		return "", false, false
	}
	return p.itemType, p.compressed, true
}

// parseHEIFMeta reads a meta box's body (version and flags first): pitm names the primary item, iinf
// its type, iprp's ipma its properties in ipco.
func parseHEIFMeta(meta []byte) (heifPrimary, error) {
	if len(meta) < 4 {
		return heifPrimary{}, errHEIFMeta
	}
	var (
		primary    uint32
		sawPrimary bool
		types      = map[uint32]string{}
		props      []string // ipco's property types, in order
		propBodies [][]byte
		assoc      = map[uint32][]int{}
		derived    = map[uint32][]uint32{} // iref dimg: the items a derived picture is made of
	)
	err := children(meta[4:], func(typ string, body []byte) error {
		switch typ {
		case "pitm":
			switch {
			case len(body) >= 6 && body[0] == 0:
				primary, sawPrimary = uint32(binary.BigEndian.Uint16(body[4:6])), true
			case len(body) >= 8:
				primary, sawPrimary = binary.BigEndian.Uint32(body[4:8]), true
			}
		case "iinf":
			if len(body) < 6 {
				return errHEIFMeta
			}
			off := 6
			if body[0] != 0 {
				off = 8
			}
			if len(body) < off {
				return errHEIFMeta
			}
			return children(body[off:], func(typ string, b []byte) error {
				if typ != "infe" || len(b) < 4 {
					return nil
				}
				switch b[0] {
				case 2:
					if len(b) >= 12 {
						types[uint32(binary.BigEndian.Uint16(b[4:6]))] = string(b[8:12])
					}
				case 3:
					if len(b) >= 14 {
						types[binary.BigEndian.Uint32(b[4:8])] = string(b[10:14])
					}
				}
				return nil
			})
		case "iref":
			return parseDimg(body, derived)
		case "iprp":
			return children(body, func(typ string, b []byte) error {
				switch typ {
				case "ipco":
					return children(b, func(typ string, b []byte) error {
						props = append(props, typ)
						propBodies = append(propBodies, b)
						return nil
					})
				case "ipma":
					return parseIPMA(b, assoc)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil || !sawPrimary {
		return heifPrimary{}, errHEIFMeta
	}
	p := heifPrimary{itemType: types[primary]}
	coded := []uint32{primary}
	if derivedTypes[p.itemType] {
		coded = derived[primary]
	}
	for _, id := range coded {
		if t := types[id]; t != "" && !slices.Contains(p.codings, t) {
			p.codings = append(p.codings, t)
		}
		for _, i := range assoc[id] {
			if i >= 1 && i <= len(props) && (props[i-1] == "cmpC" || props[i-1] == "icef") {
				p.compressed = true
			}
		}
	}
	for _, i := range assoc[primary] {
		if i >= 1 && i <= len(props) && props[i-1] == "colr" {
			if c, ok := parseNCLX(propBodies[i-1]); ok && p.nclx == nil {
				p.nclx = &c
			}
		}
	}
	if p.nclx == nil {
		// A grid's colour may sit on its tiles only: any nclx of the file then describes it.
		for i, typ := range props {
			if typ == "colr" {
				if c, ok := parseNCLX(propBodies[i]); ok {
					p.nclx = &c
					break
				}
			}
		}
	}
	return p, nil
}

// parseIPMA reads the item property associations: each item's 1-based indices into ipco.
func parseIPMA(b []byte, assoc map[uint32][]int) error {
	if len(b) < 8 {
		return errHEIFMeta
	}
	version, wide := b[0], b[3]&1 != 0
	count := binary.BigEndian.Uint32(b[4:8])
	off := 8
	for range count {
		var id uint32
		if version < 1 {
			if off+2 > len(b) {
				return errHEIFMeta
			}
			id, off = uint32(binary.BigEndian.Uint16(b[off:])), off+2
		} else {
			if off+4 > len(b) {
				return errHEIFMeta
			}
			id, off = binary.BigEndian.Uint32(b[off:]), off+4
		}
		if off >= len(b) {
			return errHEIFMeta
		}
		n := int(b[off])
		off++
		for range n {
			if wide {
				if off+2 > len(b) {
					return errHEIFMeta
				}
				assoc[id] = append(assoc[id], int(binary.BigEndian.Uint16(b[off:])&0x7FFF))
				off += 2
			} else {
				if off >= len(b) {
					return errHEIFMeta
				}
				assoc[id] = append(assoc[id], int(b[off]&0x7F))
				off++
			}
		}
	}
	return nil
}

// parseNCLX reads a colr property of type nclx: primaries, transfer and matrix (16 bits each), then
// the full-range flag.
func parseNCLX(b []byte) (cicp, bool) {
	if len(b) < 11 || string(b[0:4]) != "nclx" {
		return cicp{}, false
	}
	return cicp{
		primaries: binary.BigEndian.Uint16(b[4:6]),
		transfer:  binary.BigEndian.Uint16(b[6:8]),
		matrix:    binary.BigEndian.Uint16(b[8:10]),
		fullRange: b[10]&0x80 != 0,
	}, true
}

// derivedTypes are the item types of pictures made of other items.
var derivedTypes = map[string]bool{"grid": true, "iden": true, "iovl": true}

// parseDimg reads iref's dimg references: the items each derived picture is made of.
func parseDimg(b []byte, derived map[uint32][]uint32) error {
	if len(b) < 4 {
		return errHEIFMeta
	}
	idSize := 2
	if b[0] != 0 {
		idSize = 4
	}
	id := func(b []byte) uint32 {
		if idSize == 2 {
			return uint32(binary.BigEndian.Uint16(b))
		}
		return binary.BigEndian.Uint32(b)
	}
	return children(b[4:], func(typ string, r []byte) error {
		if typ != "dimg" || len(r) < idSize+2 {
			return nil
		}
		from := id(r)
		n := int(binary.BigEndian.Uint16(r[idSize:]))
		r = r[idSize+2:]
		for i := 0; i < n && len(r) >= idSize; i++ {
			derived[from] = append(derived[from], id(r))
			r = r[idSize:]
		}
		return nil
	})
}

// heifCodings are what this libheif (1.15, with libde265 and dav1d/aom) decodes.
var heifCodings = map[string]bool{"hvc1": true, "av01": true}

// heifCodingNames name the codings people may know, for the refusal of one this libheif does not
// decode.
var heifCodingNames = map[string]string{
	"unci": "uncompressed, ISO/IEC 23001-17",
	"j2k1": "JPEG 2000",
	"jpeg": "JPEG",
	"avc1": "H.264",
	"vvc1": "VVC",
	"evc1": "EVC",
	"mski": "a mask",
}

// HEIFUnsupported says, from the first bytes of an ISO base media file, whether it is a HEIF image
// (AVIF included) whose primary picture this libheif cannot decode, and why, in words for the
// refusal ("HEIF image with an unsupported coding (JPEG 2000)"); heif reports that head holds a
// HEIF image's structure at all (a meta box with a primary item, or a low-overhead mini box), so
// that one whose brand detection does not map is still taken for an image; avif that its pictures
// are AV1. An unknown or unreadable structure says nothing (heif false): detection goes on as
// before.
func HEIFUnsupported(head []byte) (heif, avif bool, refusal string) {
	var meta []byte
	mini := false
	_ = children(boxesHeld(head), func(typ string, body []byte) error {
		switch typ {
		case "meta":
			if meta == nil {
				meta = body
			}
		case "mini":
			mini = true
		}
		return nil
	})
	if mini && meta == nil {
		return true, false, "HEIF image with an unsupported coding (the low-overhead 'mini' form of HEIF, 2025)"
	}
	if meta == nil {
		return false, false, ""
	}
	p, err := parseHEIFMeta(meta)
	if err != nil || len(p.codings) == 0 {
		return false, false, ""
	}
	return true, slices.Contains(p.codings, "av01"), p.unsupported()
}

// unsupported is the refusal of a primary picture coded in a way this libheif does not decode, ""
// when it decodes it (or nothing is known of its coding).
func (p heifPrimary) unsupported() string {
	if p.compressed {
		return "HEIF image with an unsupported coding (compressed with deflate, zlib or brotli)"
	}
	for _, c := range p.codings {
		if !heifCodings[c] {
			name, ok := heifCodingNames[c]
			if !ok {
				name = "item type '" + printable(c) + "'"
			}
			return "HEIF image with an unsupported coding (" + name + ")"
		}
	}
	return ""
}

// boxesHeld returns the part of head made of whole top-level boxes: a box cut off at head's end is
// left out (and so is what follows).
func boxesHeld(head []byte) []byte {
	off := 0
	for off+8 <= len(head) {
		size := int(binary.BigEndian.Uint32(head[off:]))
		if size < 8 || size > len(head)-off {
			break
		}
		off += size
	}
	return head[:off]
}

// printable replaces bytes outside printable ASCII in a four-character code by '?'.
func printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '\'' {
			b[i] = '?'
		}
	}
	return string(b)
}
