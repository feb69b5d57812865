package testenv

// Device-like media: what phones, camcorders, screen recorders and old cameras write, made with the
// same ffmpeg the worker runs (codecs, containers, colour tags and rotation as the devices set them),
// and real sample files that other projects ship (mimetype's testdata, from the Go module proxy).

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// HDR transfer functions, as ffprobe names them.
const (
	TransferHLG = "arib-std-b67"
	TransferPQ  = "smpte2084"
)

// DeviceClip describes a clip made by MakeDeviceClip.
type DeviceClip struct {
	Name          string // file name in dir, its extension as the device writes it
	Width, Height int    // stored frame size (before any rotation); default 320×180
	Seconds       float64
	// Format is ffmpeg's muxer: mov, mp4, matroska, webm, avi, mpegts, vob, mpeg (and flv, asf for
	// containers the worker refuses).
	Format string
	// M2TS writes an MPEG-TS with 192-byte packets (a 4-byte timestamp before each 188-byte
	// packet), as AVCHD camcorders write .mts/.m2ts files.
	M2TS bool
	// VCodec and ACodec are ffmpeg encoder names ("" for no audio).
	VCodec, ACodec string
	// Transfer makes an HDR clip: TransferHLG or TransferPQ. The testsrc2 pattern is converted
	// (not just tagged) from SDR BT.709 to 10-bit BT.2020 with that transfer, with SDR white at
	// 100 cd/m², so a correct tone map gives back about the SDR pattern.
	Transfer string
	// EightBit keeps an HDR clip's samples 8-bit (as some cameras write HLG H.264) instead of 10.
	EightBit bool
	// Interlaced (libx264) makes 25 interlaced frames a second, top field first, from 50 pictures a
	// second (each field 1/50 s after the other, so moving content combs when shown as frames), as
	// 1080i camcorders do.
	Interlaced bool
	// Rotate90 (mov/mp4) stores a display matrix "turn 90° to view", as phones do for upright videos.
	Rotate90 bool
}

// MakeDeviceClip writes dir/c.Name: testsrc2 video and a 440 Hz tone (when ACodec is set).
func MakeDeviceClip(t testing.TB, dir string, c DeviceClip) string {
	t.Helper()
	if c.Width == 0 {
		c.Width, c.Height = 320, 180
	}
	if c.Seconds == 0 {
		c.Seconds = 1
	}
	dur := strconv.FormatFloat(c.Seconds, 'f', -1, 64)
	rate := 25
	if c.Interlaced {
		rate = 50
	}
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=s=%dx%d:r=%d:d=%s", c.Width, c.Height, rate, dur)}
	if c.ACodec != "" {
		args = append(args, "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:d="+dur)
	}
	if c.Interlaced && c.Transfer != "" {
		t.Fatal("MakeDeviceClip: an interlaced HDR clip is not supported")
	}
	if c.Interlaced {
		args = append(args, "-vf", "tinterlace=mode=interleave_top,setfield=tff")
	}
	switch c.Transfer {
	case "":
	case TransferHLG, TransferPQ:
		pixFmt := "yuv420p10le"
		if c.EightBit {
			pixFmt = "yuv420p"
		}
		args = append(args,
			"-vf", "zscale=tin=bt709:min=bt709:pin=bt709:rin=tv:t="+c.Transfer+":m=2020_ncl:p=bt2020:r=tv:npl=100,format="+pixFmt,
			"-color_primaries", "bt2020", "-color_trc", c.Transfer, "-colorspace", "bt2020nc", "-color_range", "tv")
	default:
		t.Fatalf("MakeDeviceClip: unknown transfer %q", c.Transfer)
	}
	args = append(args, "-c:v", c.VCodec)
	switch c.VCodec {
	case "libx264":
		args = append(args, "-preset", "ultrafast")
		if c.Transfer == "" {
			args = append(args, "-pix_fmt", "yuv420p")
		}
		if c.Interlaced {
			args = append(args, "-flags", "+ildct+ilme", "-x264-params", "tff=1", "-field_order", "tt")
		}
	case "libx265":
		args = append(args, "-preset", "ultrafast", "-x265-params", "log-level=error")
		if c.Format == "mov" || c.Format == "mp4" {
			args = append(args, "-tag:v", "hvc1") // as iPhones tag HEVC
		}
	case "libvpx-vp9":
		args = append(args, "-deadline", "realtime", "-cpu-used", "8", "-b:v", "500k")
	case "libsvtav1":
		args = append(args, "-preset", "12")
	case "mpeg4", "mpeg2video":
		args = append(args, "-q:v", "5")
	default:
		t.Fatalf("MakeDeviceClip: unknown video encoder %q", c.VCodec)
	}
	if c.ACodec != "" {
		args = append(args, "-c:a", c.ACodec)
	}
	if c.M2TS {
		args = append(args, "-mpegts_m2ts_mode", "1")
	}
	out := filepath.Join(dir, c.Name)
	args = append(args, "-t", dur, "-f", c.Format, out)
	runTool(t, "ffmpeg", args...)
	if c.Rotate90 {
		rotateFirstTrack(t, out)
	}
	return out
}

// The device clips the tests share: what each device writes, in its own container and codecs.

// MakePhoneHLG writes an iPhone-like portrait clip: 10-bit HLG HEVC (hvc1) with AAC in a MOV whose
// display matrix turns the stored 320×180 frames upright (shown 180×320).
func MakePhoneHLG(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "phone_hlg.mov", Format: "mov", VCodec: "libx265", ACodec: "aac",
		Transfer: TransferHLG, Rotate90: true})
}

// MakePQClip writes an HDR10-like clip: 10-bit PQ HEVC with AAC in an MP4, 320×180.
func MakePQClip(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "hdr10_pq.mp4", Format: "mp4", VCodec: "libx265", ACodec: "aac",
		Transfer: TransferPQ})
}

// MakeScreenMKV writes a screen-recorder-like VP9/Opus Matroska file, 320×180.
func MakeScreenMKV(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "screen.mkv", Format: "matroska", VCodec: "libvpx-vp9", ACodec: "libopus"})
}

// MakeCameraAVI writes an old-camera-like MPEG-4 Part 2/MP3 AVI, 320×180.
func MakeCameraAVI(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "camera.avi", Format: "avi", VCodec: "mpeg4", ACodec: "libmp3lame"})
}

// MakeCamcorderMTS writes an AVCHD-camcorder-like H.264/AC-3 M2TS (192-byte packets), 320×180.
func MakeCamcorderMTS(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "camcorder.mts", Format: "mpegts", M2TS: true, VCodec: "libx264", ACodec: "ac3"})
}

// MakeBroadcastTS writes a plain MPEG-TS (188-byte packets) with H.264/AAC, 320×180.
func MakeBroadcastTS(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "recording.ts", Format: "mpegts", VCodec: "libx264", ACodec: "aac"})
}

// MakeDVDVOB writes a DVD-camcorder-like MPEG-2/AC-3 program stream (.vob), 320×180.
func MakeDVDVOB(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "dvd.vob", Format: "vob", VCodec: "mpeg2video", ACodec: "ac3"})
}

// MakeMPEGPS writes an MPEG-1-era program stream (.mpg): MPEG-2 video and MP2 audio, 320×180.
func MakeMPEGPS(t testing.TB, dir string) string {
	return MakeDeviceClip(t, dir, DeviceClip{Name: "clip.mpg", Format: "mpeg", VCodec: "mpeg2video", ACodec: "mp2"})
}

// MakeM4A writes a voice-memo-like AAC .m4a (ftyp brand "M4A "): audio only.
func MakeM4A(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "memo.m4a")
	runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:d=1",
		"-c:a", "aac", "-b:a", "64k", "-f", "ipod", out)
	return out
}

// ColourInfo is what ffprobe says about the first video stream's pixels and colour tags.
type ColourInfo struct {
	Codec, PixFmt, FieldOrder           string
	Primaries, Transfer, Space, Range   string
	Width, Height                       int // stored frame size
	DisplayWidth, DisplayHeight, Rotate int // after the display matrix
}

// ProbeColour reports the first video stream's codec, pixel format, colour tags and display size.
func ProbeColour(t testing.TB, path string) ColourInfo {
	t.Helper()
	out := runTool(t, "ffprobe", "-hide_banner", "-v", "error", "-select_streams", "v:0", "-of", "json",
		"-show_streams", path)
	var raw struct {
		Streams []struct {
			CodecName string `json:"codec_name"`
			PixFmt    string `json:"pix_fmt"`
			Width     int    `json:"width"`
			Height    int    `json:"height"`
			Primaries string `json:"color_primaries"`
			Transfer  string `json:"color_transfer"`
			Space     string `json:"color_space"`
			Range     string `json:"color_range"`
			Field     string `json:"field_order"`
			SideData  []struct {
				Rotation float64 `json:"rotation"`
			} `json:"side_data_list"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &raw); err != nil || len(raw.Streams) == 0 {
		t.Fatalf("ffprobe found no video stream in %s (%v): %s", path, err, out)
	}
	s := raw.Streams[0]
	c := ColourInfo{Codec: s.CodecName, PixFmt: s.PixFmt, FieldOrder: s.Field, Primaries: s.Primaries, Transfer: s.Transfer,
		Space: s.Space, Range: s.Range, Width: s.Width, Height: s.Height, DisplayWidth: s.Width, DisplayHeight: s.Height}
	for _, sd := range s.SideData {
		c.Rotate = int(sd.Rotation)
	}
	if c.Rotate%180 != 0 {
		c.DisplayWidth, c.DisplayHeight = s.Height, s.Width
	}
	return c
}

// CombedFrames runs ffmpeg's interlace detector (idet) over a video and returns how many frames it
// found interlaced (top or bottom field first) and how many it looked at.
func CombedFrames(t testing.TB, path string) (interlaced, total int) {
	t.Helper()
	bin := RequireBinary(t, "ffmpeg")
	ctx, cancel := context.WithTimeout(context.Background(), mediaToolTimeout)
	defer cancel()
	// idet reports on stderr at the info level.
	out, err := exec.CommandContext(ctx, bin, "-nostdin", "-hide_banner", "-i", path, "-vf", "idet", "-an", "-f", "null", "-").CombinedOutput()
	if err != nil {
		t.Fatalf("running idet on %s: %v\n%s", path, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		_, stats, ok := strings.Cut(line, "Multi frame detection:")
		if !ok {
			continue
		}
		f := strings.Fields(stats) // TFF: n BFF: n Progressive: n Undetermined: n
		for i := 0; i+1 < len(f); i += 2 {
			n, _ := strconv.Atoi(f[i+1])
			total += n
			if f[i] == "TFF:" || f[i] == "BFF:" {
				interlaced += n
			}
		}
		return interlaced, total
	}
	t.Fatalf("idet printed no statistics for %s:\n%s", path, out)
	return 0, 0
}

// FrameStats are signalstats' averages over one decoded frame: luma (YAVG) and saturation (SATAVG),
// 8-bit scale.
type FrameStats struct{ Luma, Saturation float64 }

// MeasureFrame decodes the first frame of an image or video (converted to 8-bit yuv420p the plain
// way, without any tone mapping, as a browser that ignores HDR tags would) and returns its averages.
func MeasureFrame(t testing.TB, path string) FrameStats {
	t.Helper()
	out := runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-i", path,
		"-vf", "format=yuv420p,signalstats,metadata=print:file=-", "-frames:v", "1", "-f", "null", "-")
	var s FrameStats
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch k {
		case "lavfi.signalstats.YAVG":
			s.Luma = f
		case "lavfi.signalstats.SATAVG":
			s.Saturation = f
		}
	}
	if s.Luma == 0 && s.Saturation == 0 {
		t.Fatalf("signalstats printed nothing for %s: %s", path, out)
	}
	return s
}

// SDRReference writes the SDR BT.709 testsrc2 pattern the device clips are made from, w×h, as a
// PNG: what a correct tone map of them should look like.
func SDRReference(t testing.TB, dir string, w, h int) string {
	t.Helper()
	return ffmpegImage(t, filepath.Join(dir, fmt.Sprintf("sdr_ref_%dx%d.png", w, h)),
		fmt.Sprintf("testsrc2=s=%dx%d", w, h))
}

// MimetypeSamples is the testdata directory of mimetype v1.4.3, the last release whose module ships
// its format samples (real files from many sources: avi.avi, mkv.mkv, avif.avif, m4a.m4a, ...).
func MimetypeSamples(t testing.TB) string {
	t.Helper()
	return filepath.Join(ModuleDir(t, "github.com/gabriel-vasile/mimetype", "v1.4.3"), "testdata")
}
