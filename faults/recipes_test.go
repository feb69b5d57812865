package faults

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// Issue 19's judged case against the built binary, configured by a file as a site would: a recipe
// avatar (256×256 cover around the subject, AVIF and JPEG) and a recipe card (1200×630 cover, WebP).
// A photo whose subject sits in its right third gives avatars of exactly 256×256 that hold the subject
// (libvips and ffprobe both read the AVIF); a request without recipe still gets the seed's three WebPs;
// recipe "nope" is answered once with the recipes the worker knows, and nothing is uploaded for it.
func TestRecipesFromTheConfigFile(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	conf := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(conf, []byte(`recipes:
  avatar:
    images:
      - {name: avatar, width: 256, height: 256, fit: cover, crop: attention, format: avif, quality: 60}
      - {name: avatar-jpeg, width: 256, height: 256, fit: cover, crop: attention, format: jpeg, quality: 80}
  card:
    images:
      - {name: card, width: 1200, height: 630, fit: cover, format: webp}
  centred:
    images:
      - {name: middle, width: 256, height: 256, fit: cover, crop: centre, format: jpeg}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--config", conf}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	photo := offCentrePhoto(t)
	c.upload(photo, "u/photo.jpg")

	ask := func(recipe string) string {
		req := testenv.NewRequest(bucket, "u/photo.jpg")
		req.Recipe = recipe
		testenv.PublishRequest(t, c.js, streams.Subjects().Request, req, jetstream.WithExpectStream(streams.RequestsStream()))
		return req.MediaID
	}
	avatar, card, plain, nope, centred := ask("avatar"), ask("card"), ask(""), ask("nope"), ask("centred")
	l.await([]string{avatar, card, plain, nope, centred}, 2*time.Minute)

	// The control: a centred square of the same photo misses the subject, so the avatars below hold it
	// because the crop looked for it.
	r := l.one(centred)
	if !r.Success || len(r.Processed) != 1 {
		t.Fatalf("centred: %+v", r)
	}
	mid, err := jpeg.Decode(bytes.NewReader(c.get(keyOf(t, r.Processed[0].URL))))
	if err != nil {
		t.Fatal(err)
	}
	if f := orangeShare(mid); f > 0.01 {
		t.Fatalf("control: the centred crop holds %.1f%% of the subject; the photo does not test the crop", 100*f)
	}

	// The avatar: both variants exactly 256×256, holding the orange subject.
	r = l.one(avatar)
	if !r.Success || r.Recipe != "avatar" || len(r.Processed) != 2 {
		t.Fatalf("avatar: %+v", r)
	}
	for _, v := range r.Processed {
		if v.Width != 256 || v.Height != 256 {
			t.Errorf("avatar variant %s is %d×%d in the answer", v.Quality, v.Width, v.Height)
		}
		data := fetchURL(t, v.URL, map[string]string{contracts.FormatAVIF: "image/avif", contracts.FormatJPG: "image/jpeg"}[v.Format])
		var img image.Image
		switch v.Format {
		case contracts.FormatAVIF:
			if v.Quality != "avatar" {
				t.Errorf("the avif variant is named %q", v.Quality)
			}
			if w, h := ffprobeSize(t, data); w != 256 || h != 256 {
				t.Errorf("ffprobe reads the avif as %d×%d", w, h)
			}
			img = vipsDecode(t, data, "avif")
		case contracts.FormatJPG:
			if v.Quality != "avatar-jpeg" {
				t.Errorf("the jpeg variant is named %q", v.Quality)
			}
			var err error
			if img, err = jpeg.Decode(bytes.NewReader(data)); err != nil {
				t.Fatalf("decoding the jpeg avatar: %v", err)
			}
		default:
			t.Fatalf("avatar variant of format %q", v.Format)
		}
		if b := img.Bounds(); b.Dx() != 256 || b.Dy() != 256 {
			t.Errorf("%s decodes at %d×%d", v.Quality, b.Dx(), b.Dy())
		}
		// The disc is 5.3 % of a 1000×1000 square around it; a centred square holds none of it.
		if f := orangeShare(img); f < 0.04 {
			t.Errorf("%s holds %.1f%% of the subject's colour: the crop missed the subject", v.Quality, 100*f)
		}
	}

	// The card: 1200×630 WebP.
	r = l.one(card)
	if !r.Success || r.Recipe != "card" || len(r.Processed) != 1 || r.Processed[0].Format != contracts.FormatWebP {
		t.Fatalf("card: %+v", r)
	}
	img := vipsDecode(t, fetchURL(t, r.Processed[0].URL, "image/webp"), "webp")
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 630 {
		t.Errorf("the card decodes at %d×%d, want 1200×630", b.Dx(), b.Dy())
	}

	// No recipe: the seed's answer, byte for byte in shape.
	r = l.one(plain)
	if !r.Success || r.Recipe != "" || len(r.Processed) != 3 {
		t.Fatalf("no recipe: %+v", r)
	}
	for i, q := range []string{"high", "medium", "low"} {
		if v := r.Processed[i]; v.Quality != q || v.Format != contracts.FormatWebP ||
			!strings.HasSuffix(keyOf(t, v.URL), "u/images/"+plain+"/photo_"+q+".webp") {
			t.Errorf("no recipe, variant %d: %+v", i, v)
		}
	}

	// An unknown recipe: one failure naming those it knows, nothing uploaded.
	r = l.one(nope)
	if r.Success || !strings.Contains(r.Error, `"nope" is not a recipe of this worker; it knows default, avatar, card, centred`) {
		t.Errorf("recipe nope: %+v", r)
	}
	if keys := c.keysHolding(nope); len(keys) > 0 {
		t.Errorf("a request for an unknown recipe left %v in the store", keys)
	}
}

// offCentrePhoto is a 1600×1000 JPEG: a dark, slightly textured background with an orange disc in its
// right third. A centred square crop of it holds none of the disc.
func offCentrePhoto(t *testing.T) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 1600, 1000))
	for y := 0; y < 1000; y++ {
		for x := 0; x < 1600; x++ {
			g := uint8(40 + (x*7+y*13)%9) // a faint texture, so the background is not flat
			img.Set(x, y, color.RGBA{g, g, g + 4, 255})
			dx, dy := x-1450, y-500
			if dx*dx+dy*dy < 130*130 {
				img.Set(x, y, color.RGBA{250, 140, 20, 255})
			}
		}
	}
	p := filepath.Join(t.TempDir(), "photo.jpg")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := jpeg.Encode(f, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return p
}

// orangeShare is the share of img's pixels that are the subject's orange.
func orangeShare(img image.Image) float64 {
	b := img.Bounds()
	n := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 > 200 && g>>8 > 90 && g>>8 < 190 && bl>>8 < 80 {
				n++
			}
		}
	}
	return float64(n) / float64(b.Dx()*b.Dy())
}

// vipsDecode decodes an image with libvips' command line (as a site's other tools would read it) and
// returns its pixels.
func vipsDecode(t *testing.T, data []byte, ext string) image.Image {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in."+ext), filepath.Join(dir, "out.png")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("vips", "copy", in, out).CombinedOutput(); err != nil {
		t.Fatalf("vips cannot read the %s: %v\n%s", ext, err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// ffprobeSize is the picture size ffprobe reads.
func ffprobeSize(t *testing.T, data []byte) (int, int) {
	t.Helper()
	in := filepath.Join(t.TempDir(), "in.avif")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height",
		"-of", "csv=p=0:s=x", in).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe cannot read the avif: %v\n%s", err, out)
	}
	var w, h int
	line := strings.TrimSpace(strings.Split(string(out), "\n")[0])
	if _, err := fmt.Sscanf(line, "%dx%d", &w, &h); err != nil {
		t.Fatalf("ffprobe said %q", out)
	}
	return w, h
}

// fetchURL GETs a variant's URL from the answer, as a browser would, and checks what the worker
// serves it as.
func fetchURL(t *testing.T, url, contentType string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != contentType {
		t.Fatalf("GET %s: %d %q (%v), want 200 %q", url, resp.StatusCode, resp.Header.Get("Content-Type"), err, contentType)
	}
	return data
}

// get reads an object of the bucket.
func (c *client) get(key string) []byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b bytes.Buffer
	if _, err := c.store.Get(ctx, bucket, key, &b); err != nil {
		c.t.Fatalf("reading %s: %v", key, err)
	}
	return b.Bytes()
}

// keysHolding lists the keys of the bucket (the JetStream object store) that contain s.
func (c *client) keysHolding(s string) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := c.js.ObjectStore(ctx, bucket)
	if err != nil {
		c.t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if err != nil && err != jetstream.ErrNoObjectsFound {
		c.t.Fatal(err)
	}
	var keys []string
	for _, i := range infos {
		if strings.Contains(i.Name, s) {
			keys = append(keys, i.Name)
		}
	}
	return keys
}

// keyOf is the object key of a variant URL of the embedded object store (…/objects/<bucket>/<key>) or
// nats://objectstore/<bucket>/<key>.
func keyOf(t *testing.T, url string) string {
	t.Helper()
	for _, marker := range []string{"/objects/" + bucket + "/", "objectstore/" + bucket + "/"} {
		if i := strings.Index(url, marker); i >= 0 {
			return strings.SplitN(url[i+len(marker):], "?", 2)[0]
		}
	}
	t.Fatalf("cannot find the key in %q", url)
	return ""
}
