package vips

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// stripWebPMetadata removes the EXIF, XMP and ICC chunks from an encoded WebP (RIFF) file and clears
// their flags in the VP8X header, so no camera, location or software metadata leaves the worker.
// Image and animation chunks are kept byte for byte.
func stripWebPMetadata(data []byte) ([]byte, error) {
	if len(data) < 12 || string(data[0:4]) != "RIFF" || string(data[8:12]) != "WEBP" {
		return nil, errors.New("not a RIFF WEBP file")
	}
	const (
		flagICC  = 0x20
		flagEXIF = 0x08
		flagXMP  = 0x04
	)
	out := make([]byte, 12, len(data))
	copy(out, data[:12])
	vp8x := -1 // offset of the VP8X payload in out
	for off := 12; off < len(data); {
		if off+8 > len(data) {
			return nil, fmt.Errorf("truncated chunk header at %d", off)
		}
		fourcc := string(data[off : off+4])
		size := int(binary.LittleEndian.Uint32(data[off+4 : off+8]))
		end := off + 8 + size + size&1 // chunks are padded to even sizes
		if size < 0 || end > len(data) {
			return nil, fmt.Errorf("chunk %q at %d overruns the file", fourcc, off)
		}
		switch fourcc {
		case "EXIF", "XMP ", "ICCP":
		default:
			if fourcc == "VP8X" && size >= 1 {
				vp8x = len(out) + 8
			}
			out = append(out, data[off:end]...)
		}
		off = end
	}
	if vp8x >= 0 {
		out[vp8x] &^= flagICC | flagEXIF | flagXMP
	}
	binary.LittleEndian.PutUint32(out[4:8], uint32(len(out)-8))
	return out, nil
}
