package transcoder

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// acceptedImages names the image formats the worker takes, for messages.
const acceptedImages = "JPEG, PNG, WebP, GIF, TIFF, HEIC/HEIF or AVIF"

// blockedLoaderNames are the formats of libvips loaders the worker does not allow, by nickname, as
// people know them. ImageMagick ("magick") is missing on purpose: it claims almost anything, so
// naming it says nothing about the file.
var blockedLoaderNames = map[string]string{
	"vips": "a libvips image", "jp2k": "JPEG 2000", "fits": "FITS", "rad": "Radiance HDR", "pdf": "PDF",
	"svg": "SVG", "ppm": "PPM", "matrix": "a libvips matrix", "csv": "CSV", "openexr": "OpenEXR",
	"analyze": "Analyze", "mat": "MATLAB", "openslide": "OpenSlide", "jxl": "JPEG XL", "fits_file": "FITS",
}

// imageInputError turns a failure of the header read (step "reading image header") or the decode
// ("decoding image") into an error for the person who uploaded the file: the format named as they
// know it, what is wrong in words, and nothing of scratch paths or library internals. libvips' own
// words are kept in Detail for the operator's log. The message depends only on the file, so the same
// file gets the same message every time.
func imageInputError(step, path string, sn sniffedImage, loader string, err error) *Error {
	format := sn.Format
	if format == "" && loader != "" {
		format = strings.ToUpper(formatName(loader))
	}
	if errors.Is(err, vips.ErrUnknownFormat) {
		var blocked string
		if _, after, ok := strings.Cut(err.Error(), "(it looks like "); ok {
			blocked = strings.TrimSuffix(after, ")")
		}
		switch {
		case sn.Format == "AVIF" && sn.Animated:
			return &Error{BadInput: true, Detail: err.Error(), Msg: "unsupported image: animated AVIF (an image sequence without a still picture) cannot be read; upload it as an animated WebP or GIF, or as a video"}
		case isAcceptedFormat(sn.Format):
			// The allowed loader did not claim a file that starts like one of its own: a damaged
			// file or a variant it does not read (a 0×0 TIFF, a TIFF in an exotic layout).
			return &Error{BadInput: true, Detail: err.Error(), Msg: fmt.Sprintf(
				"unsupported image: the %s file is damaged or is a kind of %s that cannot be read", sn.Format, sn.Format)}
		case sn.Format != "":
			return &Error{BadInput: true, Detail: err.Error(), Msg: fmt.Sprintf(
				"unsupported image format: %s (accepted: %s)", sn.Format, acceptedImages)}
		case blockedLoaderNames[blocked] != "":
			return &Error{BadInput: true, Detail: err.Error(), Msg: fmt.Sprintf(
				"unsupported image format: %s (accepted: %s)", blockedLoaderNames[blocked], acceptedImages)}
		}
		return &Error{BadInput: true, Detail: err.Error(), Msg: fmt.Sprintf(
			"unsupported image format: not a %s image", acceptedImages)}
	}
	var ve *vips.Error
	if !errors.As(err, &ve) {
		return badInput(step, err)
	}
	if format == "" {
		format = "image"
	}
	msg := ve.Msg
	if structural := checkStructure(path, sn.Format); structural != "" {
		// libvips' PNG reader (libspng) fails on a bad CRC or a cut-off file without a word, and its
		// WebP reader says little more; the file's own structure tells.
		msg = structural
	}
	return &Error{BadInput: true, Detail: ve.Error(), Msg: step + ": " + describeDecodeFailure(format, msg)}
}

// heifSizeLimit matches libheif's refusal of a picture larger than it reads ("Security limit exceeded:
// Image size 60000x60000 exceeds the maximum image size 16384x16384"; libheif 1.15 reads at most 16384
// pixels on a side). libvips reports it together with a "bad seek", which alone would read as a
// truncated file.
var heifSizeLimit = regexp.MustCompile(`Image size (\d+)x(\d+) exceeds the maximum image size (\d+)x(\d+)`)

// decoderSizeRefusal words a header read that failed because the decoder refused the picture's
// declared size: the pixel limit's own message when the size is over it too, else the decoder's
// limit. nil when err is something else.
func (im *Images) decoderSizeRefusal(err error, sn sniffedImage) *Error {
	var ve *vips.Error
	if !errors.As(err, &ve) {
		return nil
	}
	m := heifSizeLimit.FindStringSubmatch(ve.Msg)
	if m == nil {
		return nil
	}
	var n [4]int
	for i := range n {
		if n[i], err = strconv.Atoi(m[i+1]); err != nil {
			return nil
		}
	}
	var e *Error
	if errors.As(im.checkLimits(vips.Header{Width: n[0], Height: n[1], Pages: 1}), &e) {
		e.Detail, e.cause = ve.Error(), ve
		return e
	}
	format := sn.Format
	if format == "" {
		format = "HEIF"
	}
	return &Error{BadInput: true, Detail: ve.Error(), cause: ve, Msg: fmt.Sprintf(
		"image is %d×%d, limit is %d×%d for %s images", n[0], n[1], n[2], n[3], format)}
}

// describeDecodeFailure says in words what libvips' message msg means for a file of the format.
func describeDecodeFailure(format, msg string) string {
	m := strings.ToLower(msg)
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(m, w) {
				return true
			}
		}
		return false
	}
	switch {
	case has("'pitm'", "no primary"):
		return fmt.Sprintf("the %s file has no primary picture (an image sequence or collection without a still image is not supported)", format)
	case has("premature end", "truncated", "unexpected end", "end of file", "not enough data", "short read",
		"out of data", "unexpected eof", "end of stream", "read past", "bad seek"):
		return fmt.Sprintf("the %s file is truncated: it ends before the image does (was the upload cut short?)", format)
	case has("crc", "checksum"):
		return fmt.Sprintf("the %s file is corrupt: a checksum in it does not match its data", format)
	case has("out of memory", "cannot allocate", "memory allocation"):
		return fmt.Sprintf("the %s file needs more memory to decode than allowed", format)
	}
	return fmt.Sprintf("the %s file is damaged or uses a feature of %s that cannot be decoded", format, format)
}

// checkStructure walks the chunks of a PNG or the RIFF header of a WebP and says "crc mismatch" or
// "truncated" when the file's own structure shows it; "" when it shows nothing (or for other formats).
func checkStructure(path, format string) string {
	switch format {
	case "PNG", "WebP":
	default:
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if format == "WebP" {
		if len(data) < 12 || int64(binary.LittleEndian.Uint32(data[4:8]))+8 > int64(len(data)) {
			return "truncated"
		}
		return ""
	}
	for b := data[min(8, len(data)):]; ; {
		if len(b) < 12 {
			return "truncated" // no IEND
		}
		size := int64(binary.BigEndian.Uint32(b[0:4]))
		if size > int64(len(b))-12 {
			return "truncated"
		}
		chunk := b[4 : 8+size]
		if crc32.ChecksumIEEE(chunk) != binary.BigEndian.Uint32(b[8+size:12+size]) {
			return "crc mismatch"
		}
		if string(b[4:8]) == "IEND" {
			return ""
		}
		b = b[12+size:]
	}
}

func isAcceptedFormat(f string) bool {
	switch f {
	case "JPEG", "PNG", "WebP", "GIF", "TIFF", "HEIF", "AVIF":
		return true
	}
	return false
}
