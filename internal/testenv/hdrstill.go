package testenv

import (
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// HDR stills: an SDR picture stored as a 10-bit HEIC or AVIF tagged BT.2020 with the PQ or HLG
// transfer (nclx 9/16/9 or 9/18/9), as Android cameras and browsers write HDR photos. The SDR
// picture is known, so what a tone-mapper makes of the file can be compared with it.

// SDRPattern returns a w×h sRGB picture with colour and contrast everywhere: hue across, lightness
// down, with a grey ramp along the bottom eighth.
func SDRPattern(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			var r, g, b float64
			if y >= h*7/8 {
				r = float64(x) / float64(w-1)
				g, b = r, r
			} else {
				hue := 6 * float64(x) / float64(w)
				light := 0.15 + 0.85*float64(y)/float64(h*7/8)
				sat := 0.8
				c := sat * light
				xx := c * (1 - math.Abs(math.Mod(hue, 2)-1))
				switch int(hue) {
				case 0:
					r, g, b = c, xx, 0
				case 1:
					r, g, b = xx, c, 0
				case 2:
					r, g, b = 0, c, xx
				case 3:
					r, g, b = 0, xx, c
				case 4:
					r, g, b = xx, 0, c
				default:
					r, g, b = c, 0, xx
				}
				m := light - c
				r, g, b = r+m, g+m, b+m
			}
			img.SetNRGBA(x, y, color.NRGBA{uint8(math.Round(255 * r)), uint8(math.Round(255 * g)), uint8(math.Round(255 * b)), 255})
		}
	}
	return img
}

// MakeHDRStill writes dir/name: sdr stored as a 10-bit HDR still, format "avif" (avifenc) or
// "heic" (heif-enc), transfer "pq" (SDR white at whiteNits cd/m² in PQ) or "hlg" (SDR white at HLG's
// reference level, 75 %, for whiteNits 203), BT.2020 primaries and matrix. The tools come from
// Debian's libavif-bin and libheif-examples (scripts/install-deps.sh --test).
func MakeHDRStill(t testing.TB, dir, name, format, transfer string, whiteNits float64, sdr *image.NRGBA) string {
	t.Helper()
	b := sdr.Bounds()
	wide := image.NewNRGBA64(b)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := sdr.NRGBAAt(x, y)
			r, g, bl := srgbToLinear(c.R), srgbToLinear(c.G), srgbToLinear(c.B)
			// BT.709 → BT.2020 primaries, linear light.
			r2 := 0.6274*r + 0.3293*g + 0.0433*bl
			g2 := 0.0691*r + 0.9195*g + 0.0114*bl
			b2 := 0.0164*r + 0.0880*g + 0.8956*bl
			enc := func(v float64) uint16 {
				var e float64
				switch transfer {
				case "pq":
					e = pqInverseEOTF(v * whiteNits / 10000)
				case "hlg":
					// Display light relative to a 1000 cd/m² display, through the inverse OOTF
					// (system gamma 1.2), to scene light, then HLG's OETF.
					e = hlgOETF(math.Pow(v*whiteNits/1000, 1/1.2))
				default:
					t.Fatalf("MakeHDRStill: unknown transfer %q", transfer)
				}
				return uint16(math.Round(65535 * min(max(e, 0), 1)))
			}
			wide.SetNRGBA64(x, y, color.NRGBA64{enc(r2), enc(g2), enc(b2), 0xFFFF})
		}
	}
	src := filepath.Join(dir, name+".png")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, wide); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	tc := map[string]string{"pq": "16", "hlg": "18"}[transfer]
	out := filepath.Join(dir, name)
	switch format {
	case "avif":
		runTool(t, "avifenc", "--cicp", "9/"+tc+"/9", "-d", "10", "--min", "0", "--max", "10", src, out)
	case "heic":
		// heif-enc 1.15 converts with the nclx it is given but does not write it (heif-info: "color
		// profile: no"), so the property is added to the file afterwards.
		runTool(t, "heif-enc", "-b", "10", "-q", "95", "--colour_primaries", "9", "--transfer_characteristic", tc,
			"--matrix_coefficients", "9", src, "-o", out)
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		tn := map[string]uint16{"pq": 16, "hlg": 18}[transfer]
		if err := os.WriteFile(out, heifWithNCLX(t, data, 9, tn, 9), 0o644); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("MakeHDRStill: unknown format %q", format)
	}
	return out
}

func srgbToLinear(v uint8) float64 {
	s := float64(v) / 255
	if s <= 0.04045 {
		return s / 12.92
	}
	return math.Pow((s+0.055)/1.055, 2.4)
}

// pqInverseEOTF is SMPTE ST 2084's inverse EOTF: light relative to 10000 cd/m² to a signal in 0..1.
func pqInverseEOTF(y float64) float64 {
	const (
		m1 = 2610.0 / 16384
		m2 = 2523.0 / 4096 * 128
		c1 = 3424.0 / 4096
		c2 = 2413.0 / 4096 * 32
		c3 = 2392.0 / 4096 * 32
	)
	p := math.Pow(max(y, 0), m1)
	return math.Pow((c1+c2*p)/(1+c3*p), m2)
}

// hlgOETF is BT.2100 HLG's OETF: scene light in 0..1 to a signal in 0..1.
func hlgOETF(e float64) float64 {
	const (
		a = 0.17883277
		b = 1 - 4*a
	)
	c := 0.5 - a*math.Log(4*a)
	if e <= 1.0/12 {
		return math.Sqrt(3 * e)
	}
	return a*math.Log(12*e-b) + c
}

// heifWithNCLX returns a HEIF file (meta box, then mdat) with a colr nclx property added to its
// primary item: appended to ipco, associated in ipma, and the item locations after the meta box
// moved by what it grew.
func heifWithNCLX(t testing.TB, data []byte, primaries, transfer, matrix uint16) []byte {
	t.Helper()
	ms, me := mp4Box(t, data, 0, len(data), "meta")
	meta := append([]byte{}, data[ms:me]...)
	body := 4 // version and flags
	ps, _ := mp4Box(t, meta, body, len(meta), "pitm")
	primary := uint32(binary.BigEndian.Uint16(meta[ps+4:]))
	if meta[ps] != 0 {
		primary = binary.BigEndian.Uint32(meta[ps+4:])
	}
	rs, re := mp4Box(t, meta, body, len(meta), "iprp")
	cs, ce := mp4Box(t, meta, rs, re, "ipco")
	as, ae := mp4Box(t, meta, rs, re, "ipma")
	if ds, _ := mp4Box(t, data, 0, len(data), "mdat"); ds < ms {
		t.Fatal("heifWithNCLX: the media data comes before the meta box")
	}
	index := 0
	for off := cs; off+8 <= ce; off += int(binary.BigEndian.Uint32(meta[off:])) {
		index++
	}
	index++ // the new property's
	colr := make([]byte, 19)
	binary.BigEndian.PutUint32(colr, 19)
	copy(colr[4:], "colrnclx")
	binary.BigEndian.PutUint16(colr[12:], primaries)
	binary.BigEndian.PutUint16(colr[14:], transfer)
	binary.BigEndian.PutUint16(colr[16:], matrix)
	colr[18] = 0x80 // full range
	// ipma, rebuilt with the association added to the primary item's entry.
	ipma := meta[as:ae]
	version, wide := ipma[0], ipma[3]&1 != 0
	count := int(binary.BigEndian.Uint32(ipma[4:]))
	out := append([]byte{}, ipma[:8]...)
	off := 8
	for range count {
		idLen := 2
		if version >= 1 {
			idLen = 4
		}
		id := uint32(binary.BigEndian.Uint16(ipma[off:]))
		if idLen == 4 {
			id = binary.BigEndian.Uint32(ipma[off:])
		}
		out = append(out, ipma[off:off+idLen]...)
		off += idLen
		n := int(ipma[off])
		aLen := 1
		if wide {
			aLen = 2
		}
		assoc := ipma[off+1 : off+1+n*aLen]
		off += 1 + n*aLen
		if id == primary {
			out = append(out, byte(n+1))
			out = append(out, assoc...)
			if wide {
				out = binary.BigEndian.AppendUint16(out, uint16(index))
			} else {
				out = append(out, byte(index))
			}
			continue
		}
		out = append(out, byte(n))
		out = append(out, assoc...)
	}
	grow := len(colr) + len(out) - len(ipma)
	// The items' data in mdat (construction method 0) moves by grow: iloc is patched in place.
	ls, _ := mp4Box(t, meta, body, len(meta), "iloc")
	shiftILOC(t, meta[ls:], int64(grow))
	// Rebuild iprp: its header, ipco (grown), ipma (rebuilt), anything else as it was.
	var iprp []byte
	for off := rs; off+8 <= re; {
		size := int(binary.BigEndian.Uint32(meta[off:]))
		switch string(meta[off+4 : off+8]) {
		case "ipco":
			b := append(append([]byte{}, meta[off:off+size]...), colr...)
			binary.BigEndian.PutUint32(b, uint32(len(b)))
			iprp = append(iprp, b...)
		case "ipma":
			b := append(append([]byte{}, meta[off:off+8]...), out...)
			binary.BigEndian.PutUint32(b, uint32(len(b)))
			iprp = append(iprp, b...)
		default:
			iprp = append(iprp, meta[off:off+size]...)
		}
		off += size
	}
	iprp = append(append([]byte{}, meta[rs-8:rs]...), iprp...)
	binary.BigEndian.PutUint32(iprp, uint32(len(iprp)))
	newMeta := append(append(append([]byte{}, meta[:rs-8]...), iprp...), meta[re:]...)
	file := append(append(append([]byte{}, data[:ms-8]...), data[ms-8:ms]...), newMeta...)
	binary.BigEndian.PutUint32(file[ms-8:], uint32(len(newMeta)+8))
	return append(file, data[me:]...)
}

// shiftILOC adds delta to the file offsets of every item iloc (its body at b) places in the file
// itself (construction method 0).
func shiftILOC(t testing.TB, b []byte, delta int64) {
	t.Helper()
	version := b[0]
	offSize, lenSize, baseSize := int(b[4]>>4), int(b[4]&15), int(b[5]>>4)
	idxSize := 0
	if version == 1 || version == 2 {
		idxSize = int(b[5] & 15)
	}
	off := 6
	var count int
	if version < 2 {
		count, off = int(binary.BigEndian.Uint16(b[off:])), off+2
	} else {
		count, off = int(binary.BigEndian.Uint32(b[off:])), off+4
	}
	add := func(at, size int) {
		switch size {
		case 4:
			binary.BigEndian.PutUint32(b[at:], uint32(int64(binary.BigEndian.Uint32(b[at:]))+delta))
		case 8:
			binary.BigEndian.PutUint64(b[at:], uint64(int64(binary.BigEndian.Uint64(b[at:]))+delta))
		}
	}
	for range count {
		if version < 2 {
			off += 2
		} else {
			off += 4
		}
		method := 0
		if version == 1 || version == 2 {
			method, off = int(binary.BigEndian.Uint16(b[off:])&15), off+2
		}
		off += 2 // data reference index
		base := off
		off += baseSize
		extents := int(binary.BigEndian.Uint16(b[off:]))
		off += 2
		if method == 0 && baseSize > 0 {
			add(base, baseSize)
		}
		for range extents {
			off += idxSize
			if method == 0 && baseSize == 0 {
				add(off, offSize)
			}
			off += offSize + lenSize
		}
	}
}
