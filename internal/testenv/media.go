package testenv

// Real test media, made by the same ffmpeg and libvips command-line tools the worker's hosts have,
// and ways to look at what the worker produced (ffprobe, vipsheader, MP4 atom order).

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mediaToolTimeout bounds every media-making command: a hung tool fails the test instead of hanging it.
const mediaToolTimeout = 2 * time.Minute

// runTool runs a media tool and returns its stdout; a failure fails the test with the tool's stderr.
func runTool(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	bin := RequireBinary(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), mediaToolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("running %s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// ffmpegImage renders one frame of a lavfi source graph to out.
func ffmpegImage(t testing.TB, out, lavfi string, extra ...string) string {
	t.Helper()
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-y", "-f", "lavfi", "-i", lavfi}
	args = append(args, extra...)
	args = append(args, "-frames:v", "1", "-update", "1", out)
	runTool(t, "ffmpeg", args...)
	return out
}

// MakeJPEG writes a w×h JPEG of ffmpeg's testsrc2 pattern (detailed, so it compresses like a photo
// rather than like a flat colour) into dir and returns its path.
func MakeJPEG(t testing.TB, dir string, w, h int) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("jpeg_%dx%d.jpg", w, h))
	return ffmpegImage(t, out, fmt.Sprintf("testsrc2=s=%dx%d", w, h), "-q:v", "3")
}

// MakeJPEGOrientation writes a w×h JPEG (stored pixels) carrying an EXIF Orientation tag, so a
// viewer that honours it shows the image rotated (5-8 swap width and height).
func MakeJPEGOrientation(t testing.TB, dir string, w, h, orientation int) string {
	t.Helper()
	src := MakeJPEG(t, t.TempDir(), w, h)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 2 || data[0] != 0xFF || data[1] != 0xD8 {
		t.Fatalf("%s is not a JPEG", src)
	}
	// APP1 "Exif" segment with a big-endian TIFF header and one IFD holding Orientation (0x0112,
	// SHORT, count 1).
	var tiff bytes.Buffer
	tiff.WriteString("MM\x00\x2a")
	binary.Write(&tiff, binary.BigEndian, uint32(8))      // offset of IFD0
	binary.Write(&tiff, binary.BigEndian, uint16(1))      // one entry
	binary.Write(&tiff, binary.BigEndian, uint16(0x0112)) // Orientation
	binary.Write(&tiff, binary.BigEndian, uint16(3))      // SHORT
	binary.Write(&tiff, binary.BigEndian, uint32(1))      // count
	binary.Write(&tiff, binary.BigEndian, uint16(orientation))
	binary.Write(&tiff, binary.BigEndian, uint16(0)) // value padding
	binary.Write(&tiff, binary.BigEndian, uint32(0)) // no next IFD
	payload := append([]byte("Exif\x00\x00"), tiff.Bytes()...)
	var seg bytes.Buffer
	seg.Write([]byte{0xFF, 0xE1})
	binary.Write(&seg, binary.BigEndian, uint16(len(payload)+2))
	seg.Write(payload)

	out := filepath.Join(dir, fmt.Sprintf("jpeg_%dx%d_orientation%d.jpg", w, h, orientation))
	withExif := append(append(append([]byte{}, data[:2]...), seg.Bytes()...), data[2:]...)
	if err := os.WriteFile(out, withExif, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeJPEGDisplayP3 writes a w×h JPEG of flat sRGB red stored in Display P3 with that profile
// embedded, as recent phones save photos. Its stored values are about (234, 51, 35): software that
// drops the profile without converting shows a dull orange-red.
func MakeJPEGDisplayP3(t testing.TB, dir string, w, h int) string {
	t.Helper()
	red := ffmpegImage(t, filepath.Join(t.TempDir(), "red.png"), fmt.Sprintf("color=c=red:s=%dx%d", w, h),
		"-pix_fmt", "rgb24")
	out := filepath.Join(dir, fmt.Sprintf("jpeg_p3_%dx%d.jpg", w, h))
	runTool(t, "vips", "icc_transform", red, out+"[Q=95]", "p3")
	return out
}

// MakePNGAlpha writes a w×h RGBA PNG whose alpha is about half everywhere.
func MakePNGAlpha(t testing.TB, dir string, w, h int) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("png_alpha_%dx%d.png", w, h))
	return ffmpegImage(t, out, fmt.Sprintf("testsrc2=s=%dx%d", w, h),
		"-vf", "format=rgba,colorchannelmixer=aa=0.5", "-pix_fmt", "rgba")
}

// MakeGIF writes an animated w×h GIF of frames frames that are flat red, green, blue, red, ... in
// turn, so a test can tell which frame it got.
func MakeGIF(t testing.TB, dir string, w, h, frames int) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("gif_%dx%d_%dframes.gif", w, h, frames))
	// One source whose colour depends on the frame number: concatenated colour sources lose frames.
	src := fmt.Sprintf("nullsrc=s=%dx%d:r=1,format=gbrp,"+
		"geq=r='255*eq(mod(N,3),0)':g='255*eq(mod(N,3),1)':b='255*eq(mod(N,3),2)'", w, h)
	runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y", "-f", "lavfi", "-i", src,
		"-frames:v", strconv.Itoa(frames), "-loop", "0", "-f", "gif", out)
	return out
}

// vipsConvert writes a w×h test JPEG and converts it with the vips CLI to the format of ext.
func vipsConvert(t testing.TB, dir string, w, h int, ext string) string {
	t.Helper()
	src := MakeJPEG(t, t.TempDir(), w, h)
	out := filepath.Join(dir, fmt.Sprintf("%s_%dx%d.%s", ext, w, h, ext))
	runTool(t, "vips", "copy", src, out)
	return out
}

// MakeWebP writes a w×h lossy WebP.
func MakeWebP(t testing.TB, dir string, w, h int) string { return vipsConvert(t, dir, w, h, "webp") }

// MakeTIFF writes a w×h TIFF.
func MakeTIFF(t testing.TB, dir string, w, h int) string { return vipsConvert(t, dir, w, h, "tif") }

// MakeHEIC writes a w×h HEIC (HEVC-coded HEIF; libvips' heifsave through libheif and x265).
func MakeHEIC(t testing.TB, dir string, w, h int) string { return vipsConvert(t, dir, w, h, "heic") }

// MakePNGHeader writes a tiny PNG whose header declares w×h RGB pixels but whose data is only a few
// bytes: a decompression bomb for decoders that trust the header. Decoding it fails (or would need
// w×h×3 bytes); reading its header is cheap.
func MakePNGHeader(t testing.TB, dir string, w, h int) string {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&buf, binary.BigEndian, uint32(len(data)))
		crc := crc32.NewIEEE()
		crc.Write([]byte(typ))
		crc.Write(data)
		buf.WriteString(typ)
		buf.Write(data)
		binary.Write(&buf, binary.BigEndian, crc.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8] = 8 // bit depth
	ihdr[9] = 2 // colour type RGB
	chunk("IHDR", ihdr)
	var idat bytes.Buffer
	zw := zlib.NewWriter(&idat)
	zw.Write(make([]byte, 1+3*16)) // one filter byte and a few pixels: far from w×h
	zw.Close()
	chunk("IDAT", idat.Bytes())
	chunk("IEND", nil)
	out := filepath.Join(dir, fmt.Sprintf("png_header_%dx%d.png", w, h))
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// VideoOpts describes a test video made by MakeVideo. Zero values take the defaults noted.
type VideoOpts struct {
	Width, Height int     // default 320×240
	Seconds       float64 // default 1
	FPS           int     // default 10
	VCodec        string  // h264 (default), hevc, mjpeg, vp9
	ACodec        string  // "" for no audio stream, aac, opus
	Container     string  // mov (default), mp4, mkv, webm, avi, mpegts
	// FastStart moves the mp4/mov index to the front (like most phone and web uploads).
	FastStart bool
	// Rotate90 (mov and mp4 only) stores a display matrix saying "turn 90° to view", the way phones
	// store videos shot upright: the stored frames stay Width×Height, players show Height×Width.
	Rotate90 bool
}

// MakeVideo writes dir/name: testsrc2 video (and a 440 Hz tone when ACodec is set) encoded fast.
func MakeVideo(t testing.TB, dir, name string, o VideoOpts) string {
	t.Helper()
	if o.Width == 0 {
		o.Width, o.Height = 320, 240
	}
	if o.Seconds == 0 {
		o.Seconds = 1
	}
	if o.FPS == 0 {
		o.FPS = 10
	}
	dur := strconv.FormatFloat(o.Seconds, 'f', -1, 64)
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=s=%dx%d:r=%d:d=%s", o.Width, o.Height, o.FPS, dur)}
	if o.ACodec != "" {
		args = append(args, "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:d="+dur)
	}
	switch o.VCodec {
	case "", "h264":
		args = append(args, "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p")
	case "hevc":
		args = append(args, "-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
			"-x265-params", "log-level=error")
	case "mjpeg":
		args = append(args, "-c:v", "mjpeg", "-q:v", "5", "-pix_fmt", "yuvj420p")
	case "vp9":
		args = append(args, "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1M")
	default:
		t.Fatalf("MakeVideo: unknown video codec %q", o.VCodec)
	}
	switch o.ACodec {
	case "":
	case "aac":
		args = append(args, "-c:a", "aac", "-b:a", "96k")
	case "opus":
		args = append(args, "-c:a", "libopus", "-b:a", "64k")
	default:
		t.Fatalf("MakeVideo: unknown audio codec %q", o.ACodec)
	}
	formats := map[string]string{"": "mov", "mov": "mov", "mp4": "mp4", "mkv": "matroska",
		"webm": "webm", "avi": "avi", "mpegts": "mpegts"}
	format, ok := formats[o.Container]
	if !ok {
		t.Fatalf("MakeVideo: unknown container %q", o.Container)
	}
	if o.FastStart {
		args = append(args, "-movflags", "+faststart")
	}
	out := filepath.Join(dir, name)
	args = append(args, "-t", dur, "-f", format, out)
	runTool(t, "ffmpeg", args...)
	if o.Rotate90 {
		rotateFirstTrack(t, out)
	}
	return out
}

// rotateFirstTrack rewrites the matrix in the first track header (tkhd) of an MP4/MOV to a 90°
// rotation. ffmpeg 5.1 has no option to write one.
func rotateFirstTrack(t testing.TB, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Walk moov → trak → tkhd.
	ms, me := mp4Box(t, data, 0, len(data), "moov")
	ts, te := mp4Box(t, data, ms, me, "trak")
	hs, _ := mp4Box(t, data, ts, te, "tkhd")
	if data[hs] != 0 {
		t.Fatalf("rotating %s: tkhd version %d, want 0", path, data[hs])
	}
	// version+flags 4, times and ids 20, reserved 8, layer/group/volume/reserved 8: matrix at 40.
	matrix := []uint32{0, 0x00010000, 0, 0xFFFF0000, 0, 0, 0, 0, 0x40000000}
	for i, v := range matrix {
		binary.BigEndian.PutUint32(data[hs+40+4*i:], v)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// MakeAudio writes dir/name: seconds of a 440 Hz tone as AAC in an MP4 container, and no video.
func MakeAudio(t testing.TB, dir, name string, seconds float64) string {
	t.Helper()
	dur := strconv.FormatFloat(seconds, 'f', -1, 64)
	out := filepath.Join(dir, name)
	runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:d="+dur,
		"-c:a", "aac", "-b:a", "96k", "-f", "mp4", out)
	return out
}

// ProbeStream is one stream as ffprobe reports it.
type ProbeStream struct {
	Index     int    `json:"index"`
	CodecType string `json:"codec_type"` // video, audio, ...
	CodecName string `json:"codec_name"`
	Width     int    `json:"width"`
	Height    int    `json:"height"`
	PixFmt    string `json:"pix_fmt"`
	Channels  int    `json:"channels"`
	Duration  string `json:"duration"`
}

// ProbeResult is what ffprobe says about a media file.
type ProbeResult struct {
	FormatName string  // e.g. "mov,mp4,m4a,3gp,3g2,mj2"
	Duration   float64 // seconds, 0 when unknown
	Streams    []ProbeStream
}

// Stream returns the first stream of the codec type ("video", "audio"), or nil.
func (p ProbeResult) Stream(codecType string) *ProbeStream {
	for i := range p.Streams {
		if p.Streams[i].CodecType == codecType {
			return &p.Streams[i]
		}
	}
	return nil
}

// FFprobe reports the format and streams of path; a file ffprobe cannot read fails the test.
func FFprobe(t testing.TB, path string) ProbeResult {
	t.Helper()
	out := runTool(t, "ffprobe", "-hide_banner", "-v", "error", "-of", "json",
		"-show_format", "-show_streams", path)
	var raw struct {
		Format struct {
			FormatName string `json:"format_name"`
			Duration   string `json:"duration"`
		} `json:"format"`
		Streams []ProbeStream `json:"streams"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("parsing ffprobe output for %s: %v", path, err)
	}
	d, _ := strconv.ParseFloat(raw.Format.Duration, 64)
	return ProbeResult{FormatName: raw.Format.FormatName, Duration: d, Streams: raw.Streams}
}

// ImageInfo is what libvips says about an image file after decoding all of its pixels.
type ImageInfo struct {
	Width, Height, Bands int
	Loader               string            // e.g. "webpload"
	Fields               map[string]string // every header field, as vipsheader -a prints them
}

// DecodeImage decodes every pixel of path with the vips CLI (a file that does not decode fails the
// test) and returns its header.
func DecodeImage(t testing.TB, path string) ImageInfo {
	t.Helper()
	runTool(t, "vips", "avg", path) // reads every pixel
	out := runTool(t, "vipsheader", "-a", path)
	info := ImageInfo{Fields: map[string]string{}}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		info.Fields[k] = v
	}
	info.Width, _ = strconv.Atoi(info.Fields["width"])
	info.Height, _ = strconv.Atoi(info.Fields["height"])
	info.Bands, _ = strconv.Atoi(info.Fields["bands"])
	info.Loader = info.Fields["vips-loader"]
	if info.Width == 0 || info.Height == 0 || info.Bands == 0 {
		t.Fatalf("vipsheader gave no dimensions for %s:\n%s", path, out)
	}
	return info
}

// RunVips runs the vips CLI with args; a failure fails the test.
func RunVips(t testing.TB, args ...string) {
	t.Helper()
	runTool(t, "vips", args...)
}

// ConvertImage decodes src and writes it to dst in the format dst's extension names, with the vips
// CLI (e.g. a WebP to a PNG that Go's image/png can read).
func ConvertImage(t testing.TB, src, dst string) {
	t.Helper()
	runTool(t, "vips", "copy", src, dst)
}

// Pixel returns the band values of the pixel at x, y of an image file (vips getpoint).
func Pixel(t testing.TB, path string, x, y int) []float64 {
	t.Helper()
	out := runTool(t, "vips", "getpoint", path, strconv.Itoa(x), strconv.Itoa(y))
	var vals []float64
	for _, f := range strings.Fields(string(out)) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("parsing vips getpoint output %q: %v", out, err)
		}
		vals = append(vals, v)
	}
	return vals
}

// MP4Atoms lists the types of the top-level boxes of an MP4/MOV file in file order (for example
// ftyp, moov, mdat for a fast-start file).
func MP4Atoms(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var atoms []string
	var off int64
	hdr := make([]byte, 16)
	for off < st.Size() {
		if _, err := f.ReadAt(hdr[:8], off); err != nil {
			t.Fatalf("reading box header at %d of %s: %v", off, path, err)
		}
		size := int64(binary.BigEndian.Uint32(hdr[:4]))
		typ := string(hdr[4:8])
		switch size {
		case 0: // to the end of the file
			size = st.Size() - off
		case 1: // 64-bit size follows
			if _, err := f.ReadAt(hdr[8:16], off+8); err != nil && err != io.EOF {
				t.Fatal(err)
			}
			size = int64(binary.BigEndian.Uint64(hdr[8:16]))
		}
		if size < 8 {
			t.Fatalf("%s: bad box size %d for %q at %d", path, size, typ, off)
		}
		atoms = append(atoms, typ)
		off += size
	}
	return atoms
}
