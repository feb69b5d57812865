package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/transcoder"
)

// writeConfig writes a config file for a test and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mediaworker.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodConfig = `# a site's settings
clamd:
  addr: tcp://127.0.0.1:3999
lanes:
  image_jobs: 3
jobs:
  job_timeout: 90s
limits:
  max_input_bytes: 200MiB
recipes:
  avatar:
    images:
      - {name: avatar, width: 256, height: 256, fit: cover, crop: attention, format: avif, quality: 60}
      - {name: avatar-jpeg, width: 256, height: 256, fit: cover, crop: attention, format: jpeg, quality: 80}
  card:
    images:
      - {name: card, width: 1200, height: 630, fit: cover, format: webp}
    video: default
`

func TestConfigFileSetsEverySectionAndRecipes(t *testing.T) {
	path := writeConfig(t, goodConfig)
	code, out, errs := run(t, "config", "check", path)
	if code != exitOK || !strings.Contains(out, "recipes: default, avatar, card") {
		t.Fatalf("config check: exit %d\n%s%s", code, out, errs)
	}

	cfg := app.DefaultConfig()
	c := newCommand("run", "", "")
	bindRunSettings(c, &cfg)
	if _, err := c.parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if !applyRecipes(c, &cfg, os.Stderr) {
		t.Fatal("recipes refused")
	}
	if cfg.Scanner.Addr != "tcp://127.0.0.1:3999" || cfg.PerLane[job.Image].Slots != 3 || cfg.Pipeline.JobTimeout.String() != "1m30s" || cfg.Pipeline.MaxInputBytes != 200<<20 {
		t.Errorf("settings from the file: clamd %q image jobs %d job timeout %s max input %d", cfg.Scanner.Addr, cfg.PerLane[job.Image].Slots, cfg.Pipeline.JobTimeout, cfg.Pipeline.MaxInputBytes)
	}
	av := cfg.Pipeline.Recipes["avatar"]
	if len(av.Images) != 2 || av.Images[0].Fit != transcoder.FitCover || av.Images[0].Crop != transcoder.CropAttention ||
		av.Images[0].Format != transcoder.FormatAVIF || av.Images[1].Format != transcoder.FormatJPEG || av.Images[0].Width != 256 {
		t.Errorf("avatar recipe: %+v", av)
	}
	if c.source["clamd-addr"] != path+":3" {
		t.Errorf("clamd addr's source is %q, want %s:3", c.source["clamd-addr"], path)
	}

	// A variable beats the file, a flag beats both; `config` says where each came from.
	t.Setenv("MW_CLAMD_ADDR", "tcp://127.0.0.1:4000")
	code, out, errs = run(t, "config", "--config", path, "--max-image-jobs", "5")
	if code != exitOK {
		t.Fatalf("config: exit %d\n%s", code, errs)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`clamd\.addr\s+--clamd-addr\s+tcp://127\.0\.0\.1:4000\s+MW_CLAMD_ADDR`),
		regexp.MustCompile(`lanes\.image_jobs\s+--max-image-jobs\s+5\s+flag`),
		regexp.MustCompile(`jobs\.job_timeout\s+--job-timeout\s+1m30s\s+` + regexp.QuoteMeta(path) + `:7`),
		regexp.MustCompile(`streams\.ack_wait\s+--ack-wait\s+30s\s+default`),
		regexp.MustCompile(`avatar \(` + regexp.QuoteMeta(path) + `\): images: avatar 256×256 cover avif q60`),
	} {
		if !want.MatchString(out) {
			t.Errorf("config output lacks %s:\n%s", want, out)
		}
	}
}

// Each mistake stops `config check` and `run` with exit 2, naming file, line, key and the fix, before
// anything starts (run is given an unreachable clamd: it must not get that far).
func TestConfigFileMistakes(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"typo in a variant", "recipes:\n  avatar:\n    images:\n      - {name: avatar, widht: 256, height: 256}\n",
			[]string{":4:", `recipes.avatar.images[0].widht`, `unknown key "widht"`, `did you mean "width"?`}},
		{"string for a number", "recipes:\n  card:\n    images:\n      - name: card\n        width: \"wide\"\n",
			[]string{":5:16:", "recipes.card.images[0].width", `must be a whole number from 0 to 16383, got "wide" (text)`}},
		{"negative size", "recipes:\n  card:\n    images:\n      - name: card\n        width: 1200\n        height: -630\n",
			[]string{":6:17:", "recipes.card.images[0].height", "must be from 0 to 16383, got -630"}},
		{"unknown setting", "clamd:\n  adr: tcp://127.0.0.1:1\n",
			[]string{":2:3:", "clamd.adr", `unknown key "adr" (did you mean "addr"?)`}},
		{"unknown section", "clamav:\n  addr: x\n",
			[]string{":1:1:", `unknown section "clamav" (did you mean "clamd"?)`}},
		{"number for a duration", "jobs:\n  job_timeout: 30\n",
			[]string{":2:16:", "jobs.job_timeout", "must be a duration with its unit such as 90s", "(--job-timeout)"}},
		{"text for a number", "lanes:\n  image_jobs: many\n",
			[]string{":2:15:", "lanes.image_jobs", `must be a whole number, got "many" (text)`}},
		{"negative setting", "images:\n  high_size: -5\n",
			[]string{":2:14: images.high_size (--image-high-size)", "image sizes must satisfy"}},
		{"bad format", "recipes:\n  x:\n    images:\n      - {name: x, width: 10, format: gif}\n",
			[]string{":4:", "recipes.x.images[0].format", "must be one of webp, avif, jpeg, png, got \"gif\""}},
		{"unsafe default", "recipes:\n  default:\n    images:\n      - {name: big, width: 4000, format: webp}\n",
			[]string{":2:", "recipes.default", "must be named high, medium or low"}},
		{"mp4 height zero", "recipes:\n  clip:\n    video:\n      mp4: [0]\n",
			[]string{":4:13:", "recipes.clip.video.mp4[0]", "must be an even height from 2 to 4320", "got 0"}},
		{"mp4 not a list", "recipes:\n  clip:\n    video:\n      mp4: \"x\"\n",
			[]string{":4:12:", "recipes.clip.video.mp4", "must be a list of heights such as [1080, 720], got"}},
		{"mp4 height twice", "recipes:\n  clip:\n    video:\n      mp4: [1080, 720, 1080]\n",
			[]string{":4:24:", "recipes.clip.video.mp4[2]", "1080 appears twice (also recipes.clip.video.mp4[0])"}},
		{"mp4 height as text", "recipes:\n  clip:\n    video:\n      mp4: [1080, tall]\n",
			[]string{":4:19:", "recipes.clip.video.mp4[1]", "must be a whole number"}},
		{"mp4 in the default", "recipes:\n  default:\n    video:\n      mp4: [720]\n",
			[]string{":2:", "recipes.default", "its video stays one MP4 and a poster"}},
		{"not yaml", "clamd: [\n", []string{"mediaworker.yaml"}},
		// Read as one document, the second's settings and mistakes were dropped without a word.
		{"second document", "clamd:\n  addr: tcp://127.0.0.1:1\n---\nclamd:\n  scan_timeout: bogus\n",
			[]string{":4:1:", "a second YAML document (after ---)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.body)
			for _, args := range [][]string{
				{"config", "check", path},
				{"run", "--config", path, "--clamd-addr", "tcp://127.0.0.1:1", "--clamd-wait", "1ms", "--nats-listen", "127.0.0.1:-1", "--http-addr", ""},
			} {
				code, _, errs := run(t, args...)
				if code != exitUsage {
					t.Errorf("%s: exit %d, want %d\n%s", args[0], code, exitUsage, errs)
					continue
				}
				for _, w := range append(tc.want, path) {
					if !strings.Contains(errs, w) {
						t.Errorf("%s: error lacks %q:\n%s", args[0], w, errs)
					}
				}
			}
		})
	}
}

// A value the file or a variable gives that its setting refuses is told once, at its place: not again as
// what the zero a failed parse leaves would break ("scan timeout must be positive, got 0s"), for which
// config check had no place to point at.
func TestRefusedValueIsToldOnce(t *testing.T) {
	for _, tc := range []struct {
		name, body, env string
		want            []string // each line told
	}{
		{"file", "clamd:\n  scan_timeout: bogus\n", "", []string{":2:17: clamd.scan_timeout: not a duration"}},
		{"variable beside a mistake of the file", "clamd:\n  scan_timeout: 30s\n  adr: x\n", "bogus",
			[]string{`MW_CLAMD_SCAN_TIMEOUT="bogus"`, `:3:3: clamd.adr: unknown key "adr"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("MW_CLAMD_SCAN_TIMEOUT", tc.env)
			}
			code, _, errs := run(t, "config", "check", writeConfig(t, tc.body))
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			if code != exitUsage || len(lines) != len(tc.want) {
				t.Fatalf("exit %d, want %d and %d lines:\n%s", code, exitUsage, len(tc.want), errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("lacks %q:\n%s", w, errs)
				}
			}
		})
	}
}

// A named pipe that nothing writes to is refused within configReadWait, not waited on for ever (the
// worker, handling SIGTERM itself only later, could not even be stopped but by SIGKILL).
func TestConfigFileFromAPipeNoOneWritesTo(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "mediaworker.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // unblock the reader left behind
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	was := configReadWait
	configReadWait = 200 * time.Millisecond
	t.Cleanup(func() { configReadWait = was })
	done := make(chan struct{})
	var code int
	var errs string
	go func() {
		defer close(done)
		code, _, errs = run(t, "config", "check", fifo)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("config check of a pipe no one writes to has not ended in 30s")
	}
	if want := "not read within 200ms"; code != exitUsage || !strings.Contains(errs, want) {
		t.Errorf("exit %d, want %d saying %q:\n%s", code, exitUsage, want, errs)
	}
}

// The renamed flags keep their old names, which warn and set today's setting.
func TestDeprecatedNamesStillWork(t *testing.T) {
	code, out, errs := run(t, "config", "--max-pixels", "1234", "--webp-quality-high", "90")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	if !regexp.MustCompile(`limits\.image_max_pixels\s+--image-max-pixels\s+1234\s+--max-pixels \(deprecated name\)`).MatchString(out) {
		t.Errorf("the old name's value is not today's setting's:\n%s", out)
	}
	if !strings.Contains(errs, "--max-pixels is deprecated: use --image-max-pixels (MW_IMAGE_MAX_PIXELS, limits.image_max_pixels in the config file)") ||
		!strings.Contains(errs, "--webp-quality-high is deprecated") {
		t.Errorf("no deprecation warning:\n%s", errs)
	}
	code, out, _ = run(t, "run", "--help")
	if code != exitOK || strings.Contains(out, "  --max-pixels int") || !strings.Contains(out, "--max-pixels → --image-max-pixels") {
		t.Errorf("run --help should list deprecated names apart, not as settings:\n%s", out)
	}
}

// run --help groups the flags by the config file's sections, each flag with its variable and key.
func TestHelpIsGroupedBySection(t *testing.T) {
	_, out, _ := run(t, "run", "--help")
	last := -1
	for _, s := range sections {
		i := strings.Index(out, `(config file section "`+s.name+`")`)
		if i < 0 || i < last {
			t.Errorf("section %s missing or out of order in run --help", s.name)
		}
		last = i
	}
	if !strings.Contains(out, "[MW_CLAMD_ADDR] [clamd.addr]") || !strings.Contains(out, "[MW_NATS_URL, NATS_URL] [nats.url]") {
		t.Errorf("run --help does not show variables and keys:\n%s", out)
	}
	// Every flag of run is in a section, so the file can hold every setting.
	cfg := app.DefaultConfig()
	c := newCommand("run", "", "")
	bindRunSettings(c, &cfg)
	c.fs.VisitAll(func(f *flag.Flag) {
		if _, alias := c.aliases[f.Name]; !alias && f.Name != configFlag && fileKeyOf(f.Name) == "" {
			t.Errorf("--%s has no key in the config file", f.Name)
		}
	})
}

// Every flag of run maps to the app.Config field it sets, so library errors naming fields can be told
// in flags and file keys.
func TestEveryFlagMapsToAField(t *testing.T) {
	cfg := app.DefaultConfig()
	c := newCommand("run", "", "")
	bindRunSettings(c, &cfg)
	mapped := map[string]bool{}
	for _, f := range []string{"NATS.Embedded.DataDir", "Pipeline.TmpDir", "Scanner.Addr", "Pipeline.MaxInputBytes", "HTTPAddr", "Images.MaxPixels"} {
		if flagOfField(f) == "" {
			t.Errorf("field %s has no flag", f)
		}
	}
	for _, n := range fieldFlagsMap {
		mapped[n] = true
	}
	// Flags bound to variables outside app.Config (logging, clamd-wait, config) have no field.
	outside := map[string]bool{"log-level": true, "log-format": true, "clamd-wait": true, configFlag: true}
	c.fs.VisitAll(func(f *flag.Flag) {
		if _, alias := c.aliases[f.Name]; !alias && !outside[f.Name] && !mapped[f.Name] {
			t.Errorf("--%s sets no app.Config field that flagOfField finds", f.Name)
		}
	})
	if got := describeField("Pipeline.TmpDir"); got != "--tmp-dir (MW_TMP_DIR, jobs.tmp_dir)" {
		t.Errorf("describeField: %q", got)
	}
}

// Library messages name config fields; cmd tells them as flags, variables and file keys.
func TestLibraryFieldsAreToldAsFlags(t *testing.T) {
	for in, want := range map[string]string{
		"creating data dir (NATS.Embedded.DataDir) /x":             "creating data dir (--data-dir, MW_DATA_DIR, embedded.data_dir) /x",
		"listen address (EmbeddedConfig.Listen) bad":               "listen address (--nats-listen, MW_NATS_LISTEN, embedded.listen) bad",
		"a user (ClientAuth.User) needs a password":                "a user (--nats-user, MW_NATS_USER, NATS_USER, nats.user) needs a password",
		"at least 1 slot, got 0 (WorkerConfig.Lanes[video])":       "at least 1 slot, got 0 (--max-video-jobs, MW_MAX_VIDEO_JOBS, lanes.video_jobs)",
		"the lane's ack wait Config.Lanes[image].AckWait is short": "the lane's ack wait --image-ack-wait (MW_IMAGE_ACK_WAIT, lanes.image_ack_wait) is short",
		"Storage is fine and Lanes too":                            "Storage is fine and Lanes too",
	} {
		if got := withFlags(in); got != want {
			t.Errorf("withFlags(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

// config check judges the file it names, whatever MW_CONFIG says.
func TestConfigCheckIgnoresMWConfig(t *testing.T) {
	t.Setenv("MW_CONFIG", writeConfig(t, "clamd: [\n"))
	good := writeConfig(t, goodConfig)
	if code, out, errs := run(t, "config", "check", good); code != exitOK || !strings.Contains(out, good+": valid") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
}

// A recipe's mp4 renditions are read from the file, said by `config`, and reach the pipeline's recipe.
func TestConfigFileMP4Renditions(t *testing.T) {
	path := writeConfig(t, "recipes:\n  clip:\n    video:\n      mp4: [1080, 720]\n      hls: {rungs: [{height: 720, max_kbps: 3000}]}\n")
	code, out, errs := run(t, "config", "--config", path)
	if code != exitOK || !strings.Contains(out, "video: default + mp4 [1080 720] + hls 720p≤3000kbps") {
		t.Fatalf("config: exit %d\n%s%s", code, out, errs)
	}
	cfg := app.DefaultConfig()
	c := newCommand("run", "", "")
	bindRunSettings(c, &cfg)
	if _, err := c.parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if !applyRecipes(c, &cfg, os.Stderr) {
		t.Fatal("recipes refused")
	}
	if v := cfg.Pipeline.Recipes["clip"].Video; fmt.Sprint(v.MP4) != "[1080 720]" || v.HLS == nil || v.Storyboard != nil {
		t.Errorf("clip's video: %+v", v)
	}
}
