package transcoder

import (
	"io"
	"os"
)

// Scrambled MPEG transport streams: a TV recording whose programme is scrambled (DVB-CSA, a
// conditional-access system) marks every packet of it in its header (transport_scrambling_control,
// two bits). ffmpeg demuxes the scrambled payload as if it were clear, as it does an encrypted MP4's
// (mp4_content.go): the video decodes to noise or grey. The packets' headers say so from the first
// few hundred.

// tsScrambledSample is how much of a transport stream tsScrambled reads: 5,000 packets of 188 bytes.
const tsScrambledSample = 1 << 20

// tsScrambled reports whether the MPEG-TS or M2TS file at path is scrambled: of the first packets
// that carry a payload (the tables included, which are never scrambled; null packets left out), more
// than half are marked scrambled.
func tsScrambled(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, tsScrambledSample)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF {
		return false
	}
	buf = buf[:n]
	for _, fm := range []struct{ offset, size int }{{0, 188}, {4, 192}} {
		if len(buf) < fm.offset+4*fm.size || buf[fm.offset] != 0x47 || buf[fm.offset+fm.size] != 0x47 {
			continue
		}
		var payload, scrambled int
		for off := fm.offset; off+4 <= len(buf); off += fm.size {
			if buf[off] != 0x47 {
				break // lost sync: judge what came before
			}
			if buf[off+3]&0x10 == 0 { // adaptation field only: no payload to scramble
				continue
			}
			if pid := int(buf[off+1]&0x1F)<<8 | int(buf[off+2]); pid == 0x1FFF {
				continue // null packets: a broadcast's padding, never scrambled
			}
			payload++
			if buf[off+3]>>6 != 0 {
				scrambled++
			}
		}
		return payload >= 16 && scrambled*2 > payload
	}
	return false
}
