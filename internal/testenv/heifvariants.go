package testenv

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// HEIF files this libheif does not decode, or libvips does not open, made from a HEIC libvips
// writes by rewriting a few bytes: the shapes of libheif's own test files (ISO 23001-17
// uncompressed, deflate- or brotli-compressed items, JPEG 2000) and of files with brands detection
// does not map, down to what the detector reads.

// MakeHEIFVariant writes dir/name, a 64×48 HEIC changed as variant says:
//
//   - "brand": major brand mif2 (a HEIF brand neither mimetype nor libvips maps);
//   - "unci", "j2k1": the primary item's type (ISO 23001-17 uncompressed, JPEG 2000);
//   - "compressed": a generic compression property (cmpC) on the primary item;
//   - "mini": a low-overhead HEIF (ISO/IEC 23008-12:2025): ftyp mif3 and a mini box, no meta.
func MakeHEIFVariant(t testing.TB, dir, name, variant string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if variant == "mini" {
		// ftyp (mif3, compatible mif3 and heic) and a mini box holding a made-up header and data.
		data := []byte{0, 0, 0, 24, 'f', 't', 'y', 'p', 'm', 'i', 'f', '3', 0, 0, 0, 0, 'm', 'i', 'f', '3', 'h', 'e', 'i', 'c'}
		mini := make([]byte, 64)
		binary.BigEndian.PutUint32(mini, 64)
		copy(mini[4:], "mini")
		if err := os.WriteFile(out, append(data, mini...), 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
	data, err := os.ReadFile(MakeHEIC(t, t.TempDir(), 64, 48))
	if err != nil {
		t.Fatal(err)
	}
	ms, me := mp4Box(t, data, 0, len(data), "meta")
	ps, _ := mp4Box(t, data, ms+4, me, "pitm")
	primary := uint32(binary.BigEndian.Uint16(data[ps+4:]))
	switch variant {
	case "brand":
		copy(data[8:12], "mif2")
	case "unci", "j2k1":
		is, ie := mp4Box(t, data, ms+4, me, "iinf")
		found := false
		for off := is + 6; off+8 <= ie; off += int(binary.BigEndian.Uint32(data[off:])) {
			b := off + 8
			if string(data[off+4:off+8]) == "infe" && data[b] == 2 && uint32(binary.BigEndian.Uint16(data[b+4:])) == primary {
				copy(data[b+8:b+12], variant)
				found = true
			}
		}
		if !found {
			t.Fatal("MakeHEIFVariant: no item info for the primary item")
		}
	case "compressed":
		// The first property of the first item ipma lists (libheif 1.15 writes even a small picture
		// as a grid of one tile: the tile, whose hvcC this is) becomes a cmpC (its bytes are not read).
		rs, re := mp4Box(t, data, ms+4, me, "iprp")
		cs, ce := mp4Box(t, data, rs, re, "ipco")
		as, _ := mp4Box(t, data, rs, re, "ipma")
		if data[as] != 0 || data[as+3]&1 != 0 {
			t.Fatal("MakeHEIFVariant: the ipma is not in the short form")
		}
		index := int(data[as+11] & 0x7F)
		off := cs
		for i := 1; i < index && off < ce; i++ {
			off += int(binary.BigEndian.Uint32(data[off:]))
		}
		copy(data[off+4:off+8], "cmpC")
	default:
		t.Fatalf("MakeHEIFVariant: unknown variant %q", variant)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
