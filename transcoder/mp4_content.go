package transcoder

import (
	"encoding/binary"
	"io"
	"os"
)

// What an uploaded MP4's boxes say about its content where ffprobe's answer misleads:
//
//   - Protected (DRM) media. A CENC-encrypted track (sample entry encv or enca, its original format in
//     a sinf box) is demuxed and decoded as if it were clear: its "frames" are ciphertext, and the
//     encode made an 8 s grey video with a grey poster of it. Protection is refused at probing instead,
//     in words that say so.
//   - Fragmented MP4 (an mvex box in the index, the samples in moof/mdat fragments after it). ffprobe
//     takes the duration from the movie extends header (mehd), which is whatever the muxer meant to
//     write: a live recording's declared 3,900 s over 8 s of fragments was refused as over the hour's
//     limit. The fragments' own timing (tfdt and trun) is what the content holds; an init segment alone
//     holds no sample at all.
//
// Only box headers and the small boxes needed are read (the index's track headers, the fragments'
// track run tables), bounded in count and size: this runs on uploads, before ffprobe.

// mp4Content is what readMP4Content found.
type mp4Content struct {
	protected  bool // an encrypted sample entry, protection scheme info or a pssh box
	fragmented bool // the index has an mvex box
	// noVideoTrack: the index describes tracks (their handlers read) and none of them is video.
	noVideoTrack bool
	videoTracks  int // tracks whose handler is vide, their sample table read
	// videoFrames counts the video tracks' samples (their sample tables' and their fragments').
	videoFrames int64
	// fragmentSeconds is how long the longest track's fragments last (as ffprobe's duration is the
	// longest stream's): the end of its last sample minus the decode time of its first; 0 when there
	// is none, and a track with samples in its sample table too (ffmpeg's fragmented files without
	// empty_moov) is not counted.
	fragmentSeconds float64
}

// Bounds on what readMP4Content reads: a box body it parses (a trun of a long fragment is the
// largest: 16 bytes a sample), and how deep it descends.
const (
	maxParsedBoxBytes = 16 << 20
	maxBoxDepth       = 8
	// maxBoxHeaders bounds the box headers read in all (one small read each): an hour of two-frame
	// fragments at 60 fps is about 650,000; a file of tiny boxes ends the walk there.
	maxBoxHeaders = 1_000_000
)

// protectedEntries are the sample entries of encrypted tracks: CENC's encv/enca/encs/enct/encm and
// the older iTunes FairPlay drmi/drms.
var protectedEntries = map[string]bool{"encv": true, "enca": true, "encs": true, "enct": true, "encm": true, "drmi": true, "drms": true}

// readMP4Content reads the boxes of the ISO base media file at path; ok is false for anything else
// (a file that does not start with an ftyp, moov or one of the boxes older QuickTime files start
// with) or a file that cannot be read.
func readMP4Content(path string) (c mp4Content, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return c, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return c, false
	}
	r := &mp4Reader{r: f, size: st.Size(), tracks: map[uint32]*mp4Track{}}
	n := 0
	first := true
	r.walk(0, r.size, func(typ string, body, end int64) bool {
		if first {
			first = false
			switch typ {
			case "ftyp", "moov", "wide", "free", "skip", "mdat", "styp", "sidx", "moof": // a media segment may come alone
			default:
				return false
			}
			ok = true
		}
		if n++; n > maxTopLevelBoxes {
			return false
		}
		switch typ {
		case "moov":
			r.moov(body, end)
		case "moof":
			r.moof(body, end)
		case "pssh":
			r.c.protected = true
		}
		return true
	})
	if !ok {
		return mp4Content{}, false
	}
	handlers, videos := 0, 0
	for _, t := range r.tracks {
		if t.handler {
			handlers++
		}
		if t.video {
			videos++
		}
		// A senc box says a fragment's samples are encrypted, unless the index describes the track
		// as clear: a file decrypted by a tool that rewrites encv to avc1 and its sinf to free but
		// keeps the fragments' senc, saiz and saio boxes (mp4ff-decrypt) is clear. A media segment
		// alone, without the index, is judged by its senc.
		if t.senc && !t.clearEntry {
			r.c.protected = true
		}
		if t.video && t.sawTable { // a track whose sample table was cut off says nothing of its frames
			r.c.videoTracks++
			r.c.videoFrames += t.tableSamples + t.fragmentSamples
		}
		if t.timescale > 0 && t.fragments && t.tableSamples == 0 {
			r.c.fragmentSeconds = max(r.c.fragmentSeconds, float64(t.fragmentEnd-t.fragmentStart)/float64(t.timescale))
		}
	}
	r.c.noVideoTrack = handlers > 0 && videos == 0
	return r.c, true
}

type mp4Track struct {
	id              uint32
	video           bool
	timescale       uint32
	tableSamples    int64  // in the sample table (stsz)
	sawTable        bool   // the sample table's size box was read
	defaultDuration uint32 // trex's default sample duration
	// The fragments: samples, and the decode times their runs span.
	fragments                  bool
	fragmentSamples            int64
	fragmentStart, fragmentEnd uint64
	next                       uint64 // decode time after the last run, for a fragment without tfdt
	// clearEntry: its sample description was read and holds only clear entries (avc1, mp4a, ...);
	// senc: a fragment of it carries sample encryption information.
	clearEntry, senc bool
	handler          bool // its hdlr box was read
}

type mp4Reader struct {
	r       io.ReaderAt
	size    int64
	headers int // box headers read, at most maxBoxHeaders
	c       mp4Content
	tracks  map[uint32]*mp4Track
}

// walk calls fn for each box between start and end (type, body offset, end), until fn returns false
// or a header makes no sense.
func (r *mp4Reader) walk(start, end int64, fn func(typ string, body, end int64) bool) {
	var b [16]byte
	for off := start; off+8 <= end; {
		if r.headers++; r.headers > maxBoxHeaders {
			return
		}
		if _, err := r.r.ReadAt(b[:8], off); err != nil {
			return
		}
		size, hdr, typ := int64(binary.BigEndian.Uint32(b[:4])), int64(8), string(b[4:8])
		switch size {
		case 0:
			size = end - off
		case 1:
			if off+16 > end {
				return
			}
			if _, err := r.r.ReadAt(b[8:16], off+8); err != nil {
				return
			}
			size, hdr = int64(binary.BigEndian.Uint64(b[8:16])), 16
		}
		if !isBoxType(typ) || size < hdr {
			return
		}
		boxEnd := off + size
		if size > end-off {
			boxEnd = end // cut short: what it holds is still read
		}
		if !fn(typ, off+hdr, boxEnd) {
			return
		}
		off = boxEnd
	}
}

// body reads a box body of at most maxParsedBoxBytes (nil if it is larger or unreadable).
func (r *mp4Reader) body(start, end int64) []byte {
	if end-start > maxParsedBoxBytes || end < start {
		return nil
	}
	b := make([]byte, end-start)
	if _, err := r.r.ReadAt(b, start); err != nil && err != io.EOF {
		return nil
	}
	return b
}

func (r *mp4Reader) moov(start, end int64) {
	r.walk(start, end, func(typ string, body, boxEnd int64) bool {
		switch typ {
		case "trak":
			r.trak(body, boxEnd)
		case "mvex":
			r.c.fragmented = true
			r.walk(body, boxEnd, func(typ string, body, boxEnd int64) bool {
				if b := r.body(body, boxEnd); typ == "trex" && len(b) >= 16 {
					// version/flags(4) track_ID(4) default_sample_description_index(4) default_sample_duration(4)
					r.track(binary.BigEndian.Uint32(b[4:8])).defaultDuration = binary.BigEndian.Uint32(b[12:16])
				}
				return true
			})
		case "pssh":
			r.c.protected = true
		}
		return true
	})
}

func (r *mp4Reader) track(id uint32) *mp4Track {
	t := r.tracks[id]
	if t == nil {
		t = &mp4Track{id: id}
		r.tracks[id] = t
	}
	return t
}

func (r *mp4Reader) trak(start, end int64) {
	var (
		id             uint32
		video          bool
		timescale      uint32
		samples        int64
		sawID, sawStsz bool
		clear, sealed  bool // the sample description's entries: a clear one, a protected one
		sawHdlr        bool
	)
	var visit func(start, end int64, depth int)
	visit = func(start, end int64, depth int) {
		if depth > maxBoxDepth {
			return
		}
		r.walk(start, end, func(typ string, body, boxEnd int64) bool {
			switch typ {
			case "mdia", "minf", "stbl", "edts":
				visit(body, boxEnd, depth+1)
			case "tkhd":
				b := r.body(body, min(boxEnd, body+32))
				switch {
				case len(b) >= 16 && b[0] == 0:
					id, sawID = binary.BigEndian.Uint32(b[12:16]), true
				case len(b) >= 24 && b[0] == 1:
					id, sawID = binary.BigEndian.Uint32(b[20:24]), true
				}
			case "hdlr":
				if b := r.body(body, min(boxEnd, body+12)); len(b) >= 12 {
					video, sawHdlr = string(b[8:12]) == "vide", true
				}
			case "mdhd":
				if ts, _, err := fullBoxTimes(r.body(body, min(boxEnd, body+32))); err == nil {
					timescale = ts
				}
			case "stsz", "stz2":
				// version/flags(4), then stsz's sample_size(4) or stz2's reserved and field size(4), sample_count(4)
				if b := r.body(body, min(boxEnd, body+12)); len(b) >= 12 {
					samples, sawStsz = int64(binary.BigEndian.Uint32(b[8:12])), true
				}
			case "stsd":
				// version/flags(4) entry_count(4), then the sample entries
				r.walk(body+8, boxEnd, func(typ string, body, boxEnd int64) bool {
					if protectedEntries[typ] {
						r.c.protected, sealed = true, true
					} else {
						clear = true
					}
					return true
				})
			case "sinf", "schm", "tenc":
				r.c.protected = true
			}
			return true
		})
	}
	visit(start, end, 0)
	if !sawID {
		return
	}
	t := r.track(id)
	t.video, t.timescale = video, timescale
	t.clearEntry = clear && !sealed
	t.handler = sawHdlr
	if sawStsz {
		t.tableSamples, t.sawTable = samples, true
	}
}

func (r *mp4Reader) moof(start, end int64) {
	r.walk(start, end, func(typ string, body, boxEnd int64) bool {
		if typ == "traf" {
			r.traf(body, boxEnd)
		}
		return true
	})
}

// traf adds a track fragment's runs to its track: tfhd names the track and the default sample
// duration, tfdt the decode time the fragment starts at, each trun its samples.
func (r *mp4Reader) traf(start, end int64) {
	var (
		t           *mp4Track
		defDuration uint32
		decodeTime  uint64
		sawTfdt     bool
		sawSenc     bool
		runs        [][]byte
	)
	r.walk(start, end, func(typ string, body, boxEnd int64) bool {
		switch typ {
		case "tfhd":
			b := r.body(body, min(boxEnd, body+40))
			if len(b) < 8 {
				return false
			}
			flags := binary.BigEndian.Uint32(b[0:4]) & 0xFFFFFF
			t = r.track(binary.BigEndian.Uint32(b[4:8]))
			defDuration = t.defaultDuration
			off := 8
			if flags&0x01 != 0 { // base_data_offset
				off += 8
			}
			if flags&0x02 != 0 { // sample_description_index
				off += 4
			}
			if flags&0x08 != 0 && len(b) >= off+4 {
				defDuration = binary.BigEndian.Uint32(b[off : off+4])
			}
		case "tfdt":
			b := r.body(body, min(boxEnd, body+12))
			switch {
			case len(b) >= 8 && b[0] == 0:
				decodeTime, sawTfdt = uint64(binary.BigEndian.Uint32(b[4:8])), true
			case len(b) >= 12 && b[0] == 1:
				decodeTime, sawTfdt = binary.BigEndian.Uint64(b[4:12]), true
			}
		case "trun":
			if b := r.body(body, boxEnd); b != nil {
				runs = append(runs, b)
			}
		case "senc": // sample encryption: the fragment's samples are encrypted
			sawSenc = true
		}
		return true
	})
	if t == nil {
		if sawSenc {
			r.c.protected = true // no track to judge it by
		}
		return
	}
	t.senc = t.senc || sawSenc
	if !sawTfdt {
		decodeTime = t.next
	}
	var samples int64
	var duration uint64
	for _, b := range runs {
		n, d := trunSamples(b, defDuration)
		samples += n
		duration += d
	}
	if samples == 0 {
		return
	}
	if !t.fragments || decodeTime < t.fragmentStart {
		t.fragmentStart = decodeTime
	}
	t.fragmentEnd = max(t.fragmentEnd, decodeTime+duration)
	t.fragments = true
	t.fragmentSamples += samples
	t.next = decodeTime + duration
}

// trunSamples reads a track run: its sample count and the sum of its samples' durations (each its
// own when the run carries them, else def).
func trunSamples(b []byte, def uint32) (samples int64, duration uint64) {
	if len(b) < 8 {
		return 0, 0
	}
	flags := binary.BigEndian.Uint32(b[0:4]) & 0xFFFFFF
	count := binary.BigEndian.Uint32(b[4:8])
	off := 8
	if flags&0x01 != 0 { // data_offset
		off += 4
	}
	if flags&0x04 != 0 { // first_sample_flags
		off += 4
	}
	if flags&0x100 == 0 {
		return int64(count), uint64(count) * uint64(def)
	}
	stride := 4
	for _, bit := range []uint32{0x200, 0x400, 0x800} {
		if flags&bit != 0 {
			stride += 4
		}
	}
	// Only the entries the box holds are counted: a run cut short counts what it has.
	held := uint32(max(0, (len(b)-off)/stride))
	count = min(count, held)
	for i := range int(count) {
		duration += uint64(binary.BigEndian.Uint32(b[off+i*stride:]))
	}
	return int64(count), duration
}
