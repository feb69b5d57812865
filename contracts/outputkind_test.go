package contracts

import "testing"

func TestOutputContentTypeOfEveryOutputKey(t *testing.T) {
	for _, key := range []string{"u/1/photo.jpg", "photo.jpg", "a b/c/clip.final.mov", ".jpg"} {
		k := KeysFor(Request{S3Key: key, MediaID: "550e8400-e29b-41d4-a716-446655440000"})
		for out, want := range map[string]string{
			k.Image(QualityHigh): TypeWebP, k.Image(QualityMedium): TypeWebP, k.Image(QualityLow): TypeWebP,
			k.Video(): TypeMP4, k.Poster(): TypeJPEG, k.HLS("index.m3u8"): TypeM3U8, k.HLS("seg_000.ts"): TypeMPEGTS,
			k.ImageAs(QualityHigh, "jpg"): TypeJPEG, k.HLS("master.m3u8"): TypeM3U8, k.HLS("1080.m3u8"): TypeM3U8,
			k.HLS("audio.m3u8"): TypeM3U8, k.HLS("1080_init.mp4"): TypeMP4, k.HLS("720_00012.m4s"): TypeSegment,
			k.HLS("audio_00001.m4s"): TypeSegment, k.Storyboard("storyboard.jpg"): TypeJPEG, k.Storyboard("storyboard.vtt"): TypeVTT,
		} {
			if got, ok := OutputContentType(out); !ok || got != want {
				t.Errorf("OutputContentType(%q) = %q, %v; want %q", out, got, ok, want)
			}
		}
		// A named recipe's variants, in every format.
		r := KeysFor(Request{S3Key: key, MediaID: "550e8400-e29b-41d4-a716-446655440000", Recipe: "avatar"})
		for out, want := range map[string]string{
			r.ImageAs("avatar", "avif"): TypeAVIF, r.ImageAs("avatar-jpeg", "jpg"): TypeJPEG,
			r.ImageAs("card", "webp"): TypeWebP, r.ImageAs("icon_1", "png"): TypePNG,
		} {
			if got, ok := OutputContentType(out); !ok || got != want {
				t.Errorf("OutputContentType(%q) = %q, %v; want %q", out, got, ok, want)
			}
		}
		// The upload itself is never an output.
		if got, ok := OutputContentType(key); ok {
			t.Errorf("OutputContentType(%q) = %q for the request key", key, got)
		}
	}
}

func TestOutputContentTypeRefusesOtherKeys(t *testing.T) {
	id := "550e8400-e29b-41d4-a716-446655440000"
	for _, key := range []string{
		"page.jpg", "u/page.html", "images/" + id + "/x_high.png", "images/not-a-uuid/x_high.webp",
		"images/" + id + "/x_huge.webp", "images/" + id + "/_high.webp", "thumbnail/" + id + "/other.jpg",
		"videos/" + id + "/mp4/.mp4", "videos/" + id + "/mp4/x.mov", "videos/" + id + "/hls/evil.html",
		"videos/" + id + "/hls/seg_1.ts", "images/" + id + "/x_high.webp/../../page.jpg", "",
		"images/" + id + "/x_avatar.avif", "images/" + id + "/Avatar/x_a.avif", "images/" + id + "/avatar/x_a.gif",
		"images/" + id + "/avatar/x_a.html", "videos/" + id + "/hls/master.html", "videos/" + id + "/hls/x_init.js",
		"videos/" + id + "/storyboard/other.jpg", "videos/" + id + "/storyboard/storyboard.html",
	} {
		if got, ok := OutputContentType(key); ok {
			t.Errorf("OutputContentType(%q) = %q, want refused", key, got)
		}
	}
}
