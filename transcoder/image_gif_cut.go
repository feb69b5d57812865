package transcoder

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// A GIF cut short. A GIF does not declare how many frames it has; it ends with a trailer byte (0x3B)
// after the last one. libvips' GIF loader decodes the frames a cut file holds, the last of them as
// far as it goes, and says nothing, so a cut animation came out shorter, its last frame half drawn,
// as if it were whole. Like an APNG cut short (image_ffmpeg.go), it keeps what it holds and its
// answer carries an "animation incomplete" warning. A GIF cut inside its first frame is refused by
// the decoder as truncated, as before; a still GIF missing only its trailer loses nothing and is
// not warned about.

// gifCutWarning returns the warning for the GIF at path when it ends without its trailer after or
// inside its second frame or later, "" otherwise (a whole file, or one that cannot be walked).
func gifCutWarning(path string) string {
	whole, inside, cut := gifEnding(path)
	switch {
	case !cut || whole == 0 || (whole == 1 && !inside):
		return ""
	case inside:
		return fmt.Sprintf("animation incomplete: the file ends inside frame %d, without the GIF's end (was the upload cut short?)", whole+1)
	}
	return fmt.Sprintf("animation incomplete: the file ends after frame %d, without the GIF's end (was the upload cut short?)", whole)
}

// gifEnding walks a GIF's blocks: whole is how many images it holds whole, inside says the file ends
// inside an image, cut that it ends before its trailer. A file whose blocks make no sense is not
// called cut: the decoder reports what is wrong with it.
func gifEnding(path string) (whole int, inside, cut bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, false, false
	}
	w := &walker{r: f, size: st.Size(), buf: make([]byte, walkBuffer)}
	ended := func(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
	h, err := w.next(13) // header and logical screen descriptor
	if err != nil {
		return 0, false, false
	}
	if err := w.skip(colourTable(h[10])); err != nil {
		return 0, false, false
	}
	for {
		b, err := w.next(1)
		if err != nil {
			return whole, false, ended(err)
		}
		switch b[0] {
		case 0x3B: // trailer
			return whole, false, false
		case 0x2C: // an image: descriptor, local colour table, LZW code size, data
			d, err := w.next(9)
			if err == nil {
				err = w.skip(colourTable(d[8]) + 1)
			}
			if err == nil {
				_, err = gifSubBlocks(w)
			}
			if err != nil {
				return whole, ended(err), ended(err)
			}
			whole++
		case 0x21: // an extension
			if _, err := w.next(1); err != nil {
				return whole, false, ended(err)
			}
			if _, err := gifSubBlocks(w); err != nil {
				return whole, false, ended(err)
			}
		default:
			return whole, false, false
		}
	}
}
