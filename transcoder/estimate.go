package transcoder

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"strings"

	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// Memory estimates (issue 23): a job's peak memory, from the header alone, before anything is decoded,
// so the worker's memory budget can admit jobs by the bytes they will hold and not only by count. The
// estimates follow how libvips 8.14 and ffmpeg decode here, measured one job per process on this
// worker's own calls (VmHWM above the idle RSS):
//
//   - What every image job holds: the decoded picture at the decode box (the largest variant's size;
//     shrink-on-load or a streamed shrink gets there), the variants made from it, and libwebp's
//     encoder state: about 10 bytes per pixel of the decode box (a 1920×1080 PNG 20.5 MiB, a 24 MP
//     JPEG decoded to 2048 px 29 MiB), plus libvips' thread buffers.
//   - What depends on the source: a baseline JPEG and a non-interlaced PNG stream through the shrink
//     (a 24 MP one costs what a 12 MP one does), but a progressive JPEG keeps its whole coefficient
//     array (2 bytes a sample at full size) and an interlaced PNG is decoded whole; libwebp decodes
//     the scaled picture whole; GIF keeps a full-size canvas; libheif (HEIC, AVIF) has no
//     shrink-on-load and decodes the whole picture into buffers of its own (a 24 MP HEIC held 139
//     MiB, 4.5 bytes a pixel beside the rest); TIFF is counted whole (tiled and planar files are not
//     streamed).
//   - An animation kept as one holds every frame at the decode box, 4 bytes a pixel.
//   - A video is ffmpeg's process: its libraries and codec tables, plus its frames in flight — the
//     decoder's references and frame threads at the source's size, x264's lookahead and threads at
//     the output's (a 1080p encode with 2 threads peaked at 275–290 MiB RSS, a 720p one at 160 MiB).

const (
	// imageJobBytes is what any image job holds besides its pixels (libvips' per-thread buffers, the
	// metadata, the small copy the facts are computed from).
	imageJobBytes = 8 << 20
	// bytesPerDecodedPixel is the decoded picture, its smaller variants and libwebp's encoder state,
	// per pixel of the decode box.
	bytesPerDecodedPixel = 10
	// bytesPerParallelEncodePixel is what a still's smaller variants hold when they are encoded beside
	// the largest, on a core no other job holds (writeVariants, issue 37): their encoders' state at
	// once, per pixel of the decode box. Measured (VmHWM of a fresh process, one job): a 12 MP JPEG
	// (decode box 2048×1536) +9–11 MiB, noisy 12 MP JPEGs +2–5 MiB, a 24 MP JPEG +0–1 MiB. Counted
	// whenever it may happen: whether a core is idle is known only when the job encodes.
	bytesPerParallelEncodePixel = 4
	// bytesPerAlphaPixel is libwebp's lossless encoder of the alpha plane (hash chains and histograms),
	// per pixel of the decode box of a picture with alpha: a 1920×1440 RGBA PNG held 97 MiB, 1600×1200
	// 57 MiB.
	bytesPerAlphaPixel = 24
	// bytesPerAnimationFrame is what each frame of a kept animation holds, per pixel of the decode box:
	// the decoded RGBA frame and libwebp's animation encoder's copy of it; bytesPerAnimationPixel is
	// that encoder's working canvases (previous, current, lossy and lossless candidates). A 24-frame
	// 703×681 GIF held 110 MiB, an 8-frame 990×1050 WebP 104 MiB.
	bytesPerAnimationFrame = 8
	bytesPerAnimationPixel = 40
	// bytesPerAVIFPixel is libaom's encoder state per pixel of an AVIF variant.
	bytesPerAVIFPixel = 24
	// heifBytesPerPixel is libheif's whole-picture decode, per source pixel at 8 bits a sample.
	heifBytesPerPixel = 4.5
	// ffmpegBaseBytes is an ffmpeg process before its frames: libraries, codec and filter state.
	ffmpegBaseBytes = 64 << 20
)

// imageMemoryInput is what an image's estimate depends on, read from its header.
type imageMemoryInput struct {
	format        string // jpeg, png, webp, gif, tiff, heif, avif, or another loader's name
	width, height int    // stored (not turned by orientation: the pixel count is the same)
	pages         int    // frames
	bands         int
	bytesPerBand  int  // 2 for 16-bit PNG and TIFF, else 1
	alpha         bool // an alpha channel (its plane is encoded apart, losslessly, in WebP)
	progressive   bool // a JPEG whose whole coefficient array is kept: progressive, or multi-scan
	// samples is a JPEG's samples per pixel over its components (3 for 4:4:4 colour, 1.5 for 4:2:0,
	// 1 for grey): its coefficient array's size per pixel; 0 counts as bands.
	samples    float64
	interlaced bool // an Adam7-interlaced PNG
	viaFFmpeg  bool // an APNG or AVIF sequence, decoded by ffmpeg into an animated WebP first
}

// estimateImage is the peak memory of transforming in into the variants of specs.
func estimateImage(in imageMemoryInput, specs []ImageVariantSpec, cfg ImageConfig) int64 {
	w, h := max(in.width, 1), max(in.height, 1)
	bands, bpb := max(in.bands, 1), max(in.bytesPerBand, 1)
	src := int64(w) * int64(h)
	dw, dh := fitWithinBox(w, h, decodeBox(specs, w, h))
	decoded := int64(dw) * int64(dh)

	// Frames held: an animation some variant keeps, within the animation budget.
	frames := int64(1)
	keep := false
	for _, s := range specs {
		keep = keep || s.keepsAnimation()
	}
	animated := in.pages > 1 && (in.format == "gif" || in.format == "webp") || in.viaFFmpeg
	if animated && keep && in.pages <= cfg.AnimationMaxFrames && decoded*int64(in.pages) <= cfg.AnimationMaxPixels {
		frames = int64(in.pages)
	}

	n := int64(imageJobBytes) + decoded*bytesPerDecodedPixel
	if frames > 1 {
		n += decoded * (bytesPerAnimationFrame*frames + bytesPerAnimationPixel)
	}
	if frames == 1 && len(specs) > 1 {
		n += decoded * bytesPerParallelEncodePixel
	}
	if in.alpha { // one frame's alpha plane at a time
		for _, s := range specs {
			if s.format() == FormatWebP {
				n += decoded * bytesPerAlphaPixel
				break
			}
		}
	}
	if bpb > 1 { // the thumbnail of a 16-bit source stays 16-bit until it is made sRGB
		n += decoded * int64(bands) * int64(bpb-1)
	}
	for _, s := range specs {
		if s.format() == FormatAVIF {
			vw, vh := fitWithinBox(w, h, bounds{s.Width, s.Height})
			n += int64(vw) * int64(vh) * bytesPerAVIFPixel
		}
	}

	switch {
	case in.viaFFmpeg:
		n += ffmpegBaseBytes + decoded*4 // ffmpeg's decode beside, then libvips' canvas of its WebP
	case in.format == "jpeg":
		if in.progressive {
			samples := in.samples
			if samples <= 0 {
				samples = float64(bands)
			}
			n += int64(float64(src) * samples * 2) // a 16-bit coefficient per sample
		}
	case in.format == "png":
		if in.interlaced {
			n += src * int64(bands) * int64(bpb)
		}
	case in.format == "webp":
		n += decoded * 4
		if in.pages > 1 {
			n += src * 4 // the animation's canvas
		}
	case in.format == "gif":
		n += src * 4
	case in.format == "heif" || in.format == "avif":
		n += int64(float64(src) * heifBytesPerPixel * float64(bpb))
	default: // tiff and the rest: whole
		n += src * int64(bands) * int64(bpb)
	}
	return n
}

// EstimateMemory is the peak memory transforming srcPath into the variants of specs (nil: the default
// recipe) is expected to hold, from its header, without decoding it. A file whose header cannot be
// read, or that the limits refuse from its header, is estimated at the least a job holds: the
// transform refuses it before decoding anything.
func (im *Images) EstimateMemory(srcPath string, specs []ImageVariantSpec) int64 {
	if len(specs) == 0 {
		specs = im.cfg.DefaultRecipe()
	}
	if ValidateImageRecipe(specs) != nil || im.Preload() != nil {
		return imageJobBytes
	}
	sn := sniffImage(srcPath)
	in := imageMemoryInput{viaFFmpeg: im.viaFFmpeg(sn)}
	hdr, err := vips.ReadHeader(srcPath)
	switch {
	case err == nil:
		if sn.Frames > 0 {
			hdr.Pages = sn.Frames
		}
		if im.checkLimits(hdr) != nil {
			return imageJobBytes
		}
		in.format = formatName(hdr.Loader)
		in.width, in.height, in.pages, in.bands, in.alpha = hdr.Width, hdr.Height, hdr.Pages, hdr.Bands, hdr.HasAlpha
	case in.viaFFmpeg:
		// An AVIF sequence libheif cannot read: sized by ffprobe in the transform. Until then, the
		// largest animation the budget keeps.
		return imageJobBytes + ffmpegBaseBytes + im.cfg.AnimationMaxPixels*(4+bytesPerDecodedPixel)
	default:
		return imageJobBytes
	}
	if in.format == "heif" && sn.Format == "AVIF" {
		in.format = "avif"
	}
	// By the loader libvips chose, not by our sniff: that loader is what decodes the file, and a JPEG
	// with bytes libjpeg skips after its SOI is no JPEG to the sniff.
	in.bytesPerBand, in.progressive, in.interlaced, in.samples = fileDepth(srcPath, strings.ToUpper(in.format))
	return estimateImage(in, specs, im.cfg)
}

// fileDepth reads what the header libvips reports leaves out but memory depends on: the bytes per
// sample of a PNG or TIFF, whether a JPEG keeps its whole coefficient array (progressive, or its
// components in scans of their own) and its samples per pixel, and whether a PNG is interlaced. A
// JPEG whose walk to its first scan fails counts as the worst case (jpegFrame); the rest, unread,
// count as 1 byte and not interlaced.
func fileDepth(path, format string) (bytesPerBand int, progressive, interlaced bool, samples float64) {
	bytesPerBand = 1
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	switch format {
	case "PNG":
		var ihdr [29]byte // signature, chunk length and type, width, height, depth, colour, ..., interlace
		if _, err := io.ReadFull(f, ihdr[:]); err == nil && string(ihdr[12:16]) == "IHDR" {
			if ihdr[24] == 16 {
				bytesPerBand = 2
			}
			interlaced = ihdr[28] == 1
		}
	case "JPEG":
		progressive, samples = jpegFrame(f)
	case "HEIF", "AVIF":
		bytesPerBand = heifBytesPerSample(f)
	case "TIFF":
		// Its samples' bytes (4 for float); unread (a BigTIFF, an IFD out of reach), the deepest
		// libvips loads, 8 (double): the worst case for the file's size.
		bytesPerBand = 8
		if bits := tiffBitsPerSample(f); bits > 0 {
			bytesPerBand = (bits + 7) / 8
		}
	}
	return
}

// jpegFrame walks the JPEG's marker segments up to its first scan and tells whether libjpeg will keep
// the whole coefficient array (2 bytes a sample at full size, whatever the shrink): a progressive
// frame (SOF2, the arithmetic-coded SOF10, and their hierarchical kin), and a sequential one whose
// first scan does not carry every component (its components come in scans of their own, so each must
// be held until the last). samples is the frame's samples per pixel, from its components' sampling
// factors (0 when unread: the caller counts every band at full size).
//
// A walk that cannot reach the first scan — more segments than the bound, bytes libjpeg would skip as
// "extraneous", a length running past the end — counts as the worst case for the file's size (whole
// coefficients, every band): libjpeg reads on where this walk stops, so a file built to stop it (a
// 7000×7000 progressive JPEG behind 1001 DQT segments was counted baseline, at 48 MiB, and peaked at
// 363 MiB) must not be counted cheap. A file too broken for libvips' header read never gets here.
func jpegFrame(r io.ReadSeeker) (whole bool, samples float64) {
	const worst = true
	var b [4]byte
	if _, err := r.Seek(2, io.SeekStart); err != nil {
		return worst, 0
	}
	comps := 0       // the frame's components, once its header is read
	for range 4096 { // a bound on segments before the first scan
		if _, err := io.ReadFull(r, b[:2]); err != nil || b[0] != 0xFF {
			return worst, 0
		}
		m := b[1]
		if m == 0xFF || m == 0x01 || (m >= 0xD0 && m <= 0xD7) { // fill bytes, TEM, RSTn: no length
			if m == 0xFF {
				_, _ = r.Seek(-1, io.SeekCurrent)
			}
			continue
		}
		if m == 0xD8 || m == 0xD9 { // a second SOI, an EOI before the scan: nothing to size by
			return worst, 0
		}
		if m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC { // SOFn
			if comps != 0 { // libjpeg refuses a second frame header
				return worst, 0
			}
			whole = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE
			if comps, samples = sofSamples(r); comps == 0 {
				return worst, 0
			}
			continue // sofSamples read the whole segment
		}
		if _, err := io.ReadFull(r, b[2:4]); err != nil {
			return worst, 0
		}
		n := int64(binary.BigEndian.Uint16(b[2:4])) - 2
		if n < 0 {
			return worst, 0
		}
		if m == 0xDA { // SOS: the first scan
			if comps == 0 || n < 1 {
				return worst, 0
			}
			var ns [1]byte
			if _, err := io.ReadFull(r, ns[:]); err != nil {
				return worst, 0
			}
			return whole || int(ns[0]) < comps, samples
		}
		if _, err := r.Seek(n, io.SeekCurrent); err != nil {
			return worst, 0
		}
	}
	return worst, 0
}

// sofSamples reads a frame header (r is just past its marker), all of it, and returns its components
// and samples per pixel: each component's sampling factors over the largest ones (4:2:0 colour is
// 1 + ¼ + ¼). comps is 0 when the header cannot be read or is not one libjpeg would accept.
func sofSamples(r io.Reader) (comps int, samples float64) {
	var h [8]byte // length, precision, height, width, components
	if _, err := io.ReadFull(r, h[:]); err != nil || h[7] == 0 || h[7] > 4 {
		return 0, 0
	}
	if int(binary.BigEndian.Uint16(h[0:2])) != 8+3*int(h[7]) {
		return 0, 0
	}
	c := make([]byte, 3*int(h[7]))
	if _, err := io.ReadFull(r, c); err != nil {
		return 0, 0
	}
	var hmax, vmax, sum float64
	for i := 0; i < len(c); i += 3 {
		hmax, vmax = max(hmax, float64(c[i+1]>>4)), max(vmax, float64(c[i+1]&15))
	}
	if hmax == 0 || vmax == 0 {
		return 0, 0
	}
	for i := 0; i < len(c); i += 3 {
		sum += float64(c[i+1]>>4) * float64(c[i+1]&15) / (hmax * vmax)
	}
	return int(h[7]), sum
}

// heifBytesPerSample is the bytes a sample of a HEIF or AVIF picture decodes to: 2 above 8 bits
// (libheif hands libvips 16-bit samples; a 10-bit 12 MP HEIC peaked at 141 MiB, twice the 8-bit
// one). The depth is the deepest of the coded images' properties (meta, iprp, ipco: hvcC, av1C, pixi),
// found by the boxes' sizes as libheif finds them; a file where none can be read counts as 2.
func heifBytesPerSample(r io.ReadSeeker) int {
	const worst = 2
	end, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return worst
	}
	body, metaEnd, ok := heifBox(r, 0, end, "meta")
	if !ok {
		return worst
	}
	body, iprpEnd, ok := heifBox(r, body+4, metaEnd, "iprp") // meta is a full box: version, flags
	if !ok {
		return worst
	}
	body, ipcoEnd, ok := heifBox(r, body, iprpEnd, "ipco")
	if !ok {
		return worst
	}
	bits := 0
	for off, n := body, 0; off < ipcoEnd && n < 4096; n++ {
		typ, pbody, pend, ok := heifBoxAt(r, off, ipcoEnd)
		if !ok {
			return worst
		}
		var p [20]byte
		if _, err := r.Seek(pbody, io.SeekStart); err != nil {
			return worst
		}
		got, _ := io.ReadFull(r, p[:min(int64(len(p)), pend-pbody)])
		switch {
		case typ == "hvcC" && got >= 19: // bitDepthLumaMinus8, bitDepthChromaMinus8
			bits = max(bits, 8+int(p[17]&7), 8+int(p[18]&7))
		case typ == "av1C" && got >= 3: // high_bitdepth, twelve_bit
			d := 8
			if p[2]&0x40 != 0 {
				d = 10
				if p[2]&0x20 != 0 {
					d = 12
				}
			}
			bits = max(bits, d)
		case typ == "pixi" && got >= 5: // full box, channels, bits per channel
			for i := 5; i < got && i < 5+int(p[4]); i++ {
				bits = max(bits, int(p[i]))
			}
		}
		off = pend
	}
	if bits == 0 {
		return worst
	}
	return (bits + 7) / 8
}

// heifBox finds the first box of type typ among the boxes from off to end and returns where its body
// starts and it ends.
func heifBox(r io.ReadSeeker, off, end int64, typ string) (body, boxEnd int64, ok bool) {
	for n := 0; off < end && n < 4096; n++ {
		t, b, e, ok := heifBoxAt(r, off, end)
		if !ok {
			return 0, 0, false
		}
		if t == typ {
			return b, e, true
		}
		off = e
	}
	return 0, 0, false
}

// heifBoxAt reads the header of the ISO base media box at off, which must end by end.
func heifBoxAt(r io.ReadSeeker, off, end int64) (typ string, body, boxEnd int64, ok bool) {
	var h [16]byte
	if _, err := r.Seek(off, io.SeekStart); err != nil {
		return "", 0, 0, false
	}
	if _, err := io.ReadFull(r, h[:8]); err != nil {
		return "", 0, 0, false
	}
	size, body := int64(binary.BigEndian.Uint32(h[:4])), off+8
	switch size {
	case 0: // to the end
		size = end - off
	case 1: // a 64-bit size follows
		if _, err := io.ReadFull(r, h[8:16]); err != nil {
			return "", 0, 0, false
		}
		size, body = int64(binary.BigEndian.Uint64(h[8:16])), off+16
	}
	if size < body-off || size > end-off {
		return "", 0, 0, false
	}
	return string(h[4:8]), body, off + size, true
}

// tiffBitsPerSample reads BitsPerSample (tag 258) of a classic TIFF's first IFD; 0 when it cannot.
func tiffBitsPerSample(r io.ReadSeeker) int {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if bytes.HasPrefix(hdr[:], []byte("MM")) {
		bo = binary.BigEndian
	}
	if bo.Uint16(hdr[2:4]) != 42 { // BigTIFF (43) and anything else: unknown
		return 0
	}
	if _, err := r.Seek(int64(bo.Uint32(hdr[4:8])), io.SeekStart); err != nil {
		return 0
	}
	var cnt [2]byte
	if _, err := io.ReadFull(r, cnt[:]); err != nil {
		return 0
	}
	for i := 0; i < int(bo.Uint16(cnt[:])) && i < 4096; i++ {
		var e [12]byte
		if _, err := io.ReadFull(r, e[:]); err != nil {
			return 0
		}
		if bo.Uint16(e[0:2]) != 258 {
			continue
		}
		if bo.Uint32(e[4:8]) <= 2 { // one or two SHORTs: inline
			return int(bo.Uint16(e[8:10]))
		}
		if _, err := r.Seek(int64(bo.Uint32(e[8:12])), io.SeekStart); err != nil {
			return 0
		}
		var v [2]byte
		if _, err := io.ReadFull(r, v[:]); err != nil {
			return 0
		}
		return int(bo.Uint16(v[:]))
	}
	return 0
}

// videoFramesPerThread is how many frames in flight each of ffmpeg's threads adds (frame threads in
// the decoder, x264's per-thread frames and lookahead share), and videoFramesHeld the frames held
// whatever the threads (the decoder's references, x264's lookahead, the filter graph's queue):
// calibrated so a 1080p and a 720p encode with 2 threads come out at their measured 275 and 160 MiB.
const (
	videoFramesPerThread = 12
	videoFramesHeld      = 44
)

// EstimateMemory is the peak memory of transcoding the probed video: ffmpeg's base and its frames in
// flight at the source's size (yuv420p, 1.5 bytes a pixel; twice that above 8 bits). A remux decodes
// only the poster's frames.
func (v *Videos) EstimateMemory(pr *VideoProbe) int64 {
	if pr == nil {
		return ffmpegBaseBytes
	}
	return estimateVideo(pr.Info.Width, pr.Info.Height, pr.Info.HDR != "", v.cfg.Threads, canRemux(&v.cfg, pr.p))
}

// estimateVideo is EstimateMemory's arithmetic.
func estimateVideo(w, h int, highDepth bool, threads int, remux bool) int64 {
	frame := int64(w) * int64(h) * 3 / 2
	if highDepth {
		frame *= 2
	}
	held := int64(videoFramesHeld + videoFramesPerThread*max(threads, 1))
	if remux { // the copy holds packets; the poster's run decodes a few frames
		held = int64(16 + max(threads, 1))
	}
	return ffmpegBaseBytes + frame*held
}
