package transcoder

import (
	"encoding/binary"
	"strings"
	"testing"
)

// box builds an MP4 box of type typ around payload.
func box(typ string, payload ...[]byte) []byte {
	n := 8
	for _, p := range payload {
		n += len(p)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(n))
	b = append(b, typ...)
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

// minimalMoov is a movie of 2.5 s with one 640×360 avc1 track and one mp4a track.
func minimalMoov() []byte {
	mvhd := make([]byte, 100) // version 0
	binary.BigEndian.PutUint32(mvhd[12:], 1000)
	binary.BigEndian.PutUint32(mvhd[16:], 2500)
	tkhd := make([]byte, 84)
	binary.BigEndian.PutUint32(tkhd[76:], 853<<16) // a display size, which must not be taken
	binary.BigEndian.PutUint32(tkhd[80:], 360<<16)
	track := func(handler, fourcc string) []byte {
		hdlr := append(make([]byte, 8), handler...)
		hdlr = append(hdlr, make([]byte, 13)...)
		entry := make([]byte, 78) // a visual sample entry's fixed part
		binary.BigEndian.PutUint16(entry[24:], 640)
		binary.BigEndian.PutUint16(entry[26:], 360)
		stsd := append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, box(fourcc, entry)...)
		return box("trak", box("tkhd", tkhd), box("mdia", box("hdlr", hdlr),
			box("minf", box("stbl", box("stsd", stsd)))))
	}
	return append(box("mvhd", mvhd), append(track("vide", "avc1"), track("soun", "mp4a")...)...)
}

func TestParseMoov(t *testing.T) {
	info, err := parseMoov(minimalMoov())
	if err != nil {
		t.Fatal(err)
	}
	want := VideoInfo{Duration: 2.5, Width: 640, Height: 360, VideoCodec: "h264", AudioCodec: "aac", Container: "mp4", HasAudio: true}
	if info != want {
		t.Fatalf("got %+v, want %+v", info, want)
	}
	// Every truncation is an error, never a panic or a half-filled description taken as whole.
	m := minimalMoov()
	for n := 0; n < len(m); n++ {
		if info, err := parseMoov(m[:n]); err == nil && info.Width != 0 && info.Duration != 2.5 {
			t.Fatalf("cut at %d: %+v", n, info)
		}
	}
	if _, err := parseMoov(box("mvhd", make([]byte, 100))); err == nil || !strings.Contains(err.Error(), "no video track") {
		t.Errorf("a movie without tracks: %v", err)
	}
}

// FuzzParseMoov: the reader of our own encodes' index must not panic or loop, whatever the bytes.
func FuzzParseMoov(f *testing.F) {
	f.Add(minimalMoov())
	f.Add(box("trak", box("tkhd", []byte{1})))
	f.Add([]byte{0, 0, 0, 1, 'm', 'v', 'h', 'd', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseMoov(b)
	})
}
