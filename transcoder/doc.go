// Package transcoder turns one uploaded media file into the variants the worker publishes: images
// into three WebP sizes (libvips, through transcoder/vips; animations into animated WebPs, with ffmpeg
// decoding the APNGs and AVIF sequences libvips cannot) and videos into an H.264/AAC MP4 with a
// JPEG poster and optional HLS (ffmpeg and ffprobe run as processes).
//
// It is a leaf: it knows nothing of NATS, object stores or scanning. Each call takes a context, a
// source path and an output directory (the job's scratch directory, with fixed file names inside),
// and returns a result or an *Error that says whether the input is to blame (IsBadInput).
//
// Every input is untrusted: images are refused on their header's pixel count, and on the metadata
// their structure carries (image_metadata.go), before any decoding, only six loaders are allowed, and
// none of the source's metadata reaches the encoder; ffmpeg reads only local files in a few
// whitelisted containers, under address-space, CPU-time and file-size limits set by prlimit(1) before
// it starts, in its own process group that is killed when the context ends. See DESIGN.md, "Untrusted
// input", and SECURITY.md.
//
// libvips puts any temporary files under TMPDIR, which is process-global: the worker exports its
// --tmp-dir as TMPDIR at start, before the first image loads libvips. ffmpeg and ffprobe run with the job's
// directory as their working directory and write only the fixed names documented on Transform.
package transcoder
