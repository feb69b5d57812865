package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore/s3"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
)

// A transient failure reaches the API only as "gave up after N deliveries: …", and that sentence is
// for people: these build the worker's real failures (a store and a clamd that refuse connections, a
// scratch disk that is full, failing, not a directory or not writable) and check that the response
// says what failed without an address, a path or a library's words, while ErrorDetail, which goes to
// the log line and the DLQ, keeps all of it.

// closedAddr is a loopback address nothing listens on: a dependency that is down. testenv's addresses
// are claimed for this process and outside the range another test's listener on :0 could take.
func closedAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// leaks are what a public sentence must not contain: an address's port, a path, a client library's or
// the kernel's words, a formatting accident.
var leaks = []*regexp.Regexp{
	regexp.MustCompile(`:\d`), regexp.MustCompile(`/`), regexp.MustCompile(`\\`),
	regexp.MustCompile(`(?i)dial tcp|read tcp|write tcp|connect:|connection refused|connection reset`),
	regexp.MustCompile(`(?i)no such file|permission denied|operation not permitted|no space left|input/output error|not a directory`),
	regexp.MustCompile(`(?i)context deadline|context canceled|errno|syscall|%!|"`),
}

// checkPublic fails when s, a response's error, carries more than a stage and a sentence.
func checkPublic(t *testing.T, s string) {
	t.Helper()
	for _, re := range leaks {
		if re.MatchString(s) {
			t.Errorf("public error %q matches %s", s, re)
		}
	}
	// A chain of wrapped errors reads "a: b: c: d"; a public one is at most "gave up after N
	// deliveries: <stage>: [<step>: ]<sentence>".
	if n := strings.Count(strings.TrimPrefix(s, "gave up after "), ": "); n > 3 {
		t.Errorf("public error %q reads like an error chain (%d parts)", s, n+1)
	}
}

// gaveUp is the answer the API gets when out's cause lasts through three deliveries.
func gaveUp(t *testing.T, req contracts.Request, out Outcome) Outcome {
	t.Helper()
	if out.Kind != Retry {
		t.Fatalf("kind %s, want retry (err %v)", out.Kind, out.Err)
	}
	checkPublic(t, out.Response.Error)
	g := GaveUpAfter(req, out.MediaKind, 3, out.Err)
	if err := contracts.Validate(contracts.SchemaResponse, g.Response); err != nil {
		t.Errorf("gave-up response fails the schema: %v", err)
	}
	checkPublic(t, g.Response.Error)
	return g
}

func TestGaveUpResponsesNameNoAddressPathOrChain(t *testing.T) {
	full := func(t *testing.T) error { // a real ENOSPC: what a write to a full disk returns
		t.Helper()
		f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = f.Write([]byte("x"))
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("writing /dev/full: %v, want ENOSPC", err)
		}
		return err
	}
	cases := []struct {
		name   string
		setup  func(t *testing.T, f *fixture) Deps // nil Deps fields: the fixture's fakes
		want   string                              // the whole gave-up answer
		detail string                              // what the private side must still say ("" : the setup's address)
	}{
		{"store refuses connections", func(t *testing.T, f *fixture) Deps {
			addr := closedAddr(t)
			cfg := s3.DefaultConfig()
			cfg.Endpoint, cfg.AccessKey, cfg.SecretKey, cfg.MaxRetries = addr, "key", "secretsecret", 1
			st, err := s3.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			f.note = addr
			return Deps{Store: st}
		}, "gave up after 3 deliveries: downloading: the object store could not be reached", ""},
		{"clamd refuses connections", func(t *testing.T, f *fixture) Deps {
			addr := closedAddr(t)
			cfg := scanner.DefaultConfig()
			cfg.Addr = "tcp://" + addr
			sc, err := scanner.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			f.note = addr
			return Deps{Scanner: sc}
		}, "gave up after 3 deliveries: scanning: the virus scanner could not be reached", ""},
		{"scratch disk full while downloading", func(t *testing.T, f *fixture) Deps {
			f.store.failGet = fmt.Errorf("downloading media/u/p.jpg: %w", full(t))
			f.note = "/dev/full: no space left on device"
			return Deps{}
		}, "gave up after 3 deliveries: downloading: the scratch disk is full", ""},
		{"scratch disk full while encoding", func(t *testing.T, f *fixture) Deps {
			// transcoder's internal errors: its step, and the write that failed.
			f.images.err = &transcoder.Error{Msg: "writing high webp", Err: full(t)}
			f.note = "/dev/full"
			return Deps{}
		}, "gave up after 3 deliveries: transforming: writing high webp: the scratch disk is full", ""},
		{"ffmpeg out of disk", func(t *testing.T, f *fixture) Deps {
			// ffmpeg says so only on stderr, which the transcoder reads and says in Words (its
			// classifyFFmpeg: TestFFmpegSystemFailureWords).
			f.images.err = &transcoder.Error{Msg: "transcoding video", Words: "the scratch disk is full", Err: errors.New(
				"ffmpeg exited with status 1: [out#0/mp4 @ 0x55d0c0a8c2c0] Error writing trailer of file:" + f.cfg.TmpDir + "/video.mp4: No space left on device")}
			f.note = "No space left on device"
			return Deps{}
		}, "gave up after 3 deliveries: transforming: transcoding video: the scratch disk is full", ""},
		{"scratch disk I/O error", func(t *testing.T, f *fixture) Deps {
			f.images.err = &transcoder.Error{Msg: "encoding low webp", Err: &fs.PathError{Op: "write", Path: f.cfg.TmpDir + "/mw-job-1/low.webp", Err: syscall.EIO}}
			f.note = "mw-job-1/low.webp: input/output error"
			return Deps{}
		}, "gave up after 3 deliveries: transforming: encoding low webp: the scratch disk failed (a read or write error)", ""},
		{"scratch dir is a file", func(t *testing.T, f *fixture) Deps {
			file := filepath.Join(t.TempDir(), "scratch")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			f.cfg.TmpDir = file // a real ENOTDIR from MkdirTemp
			f.note = file
			return Deps{}
		}, "gave up after 3 deliveries: preparing scratch dir: the scratch directory is missing", ""},
		{"scratch dir not writable", func(t *testing.T, f *fixture) Deps {
			// What creating an output returns in a scratch dir without write permission (built: root,
			// which runs these tests, is not refused by mode bits).
			f.images.err = &transcoder.Error{Msg: "writing high webp", Err: &fs.PathError{Op: "open", Path: f.cfg.TmpDir + "/mw-job-1/high.webp", Err: syscall.EACCES}}
			f.note = "permission denied"
			return Deps{}
		}, "gave up after 3 deliveries: transforming: writing high webp: the worker may not write to its scratch directory", ""},
		{"scratch disk short of space", func(t *testing.T, f *fixture) Deps {
			f.cfg.MinFreeBytes = 1 << 62
			f.note = f.cfg.TmpDir
			return Deps{}
		}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			d := tc.setup(t, f)
			if d.Store != nil {
				f.alt.Store = d.Store
			}
			if d.Scanner != nil {
				f.alt.Scanner = d.Scanner
			}
			out := f.run(t)
			g := gaveUp(t, f.req, out)
			if tc.want != "" && g.Response.Error != tc.want {
				t.Errorf("gave-up answer\n%q, want\n%q", g.Response.Error, tc.want)
			}
			if !strings.HasPrefix(g.Response.Error, "gave up after 3 deliveries: ") {
				t.Errorf("gave-up answer %q", g.Response.Error)
			}
			// The private side keeps what the public one leaves out.
			detail := ErrorDetail(g.Err)
			if !strings.Contains(detail, f.note) {
				t.Errorf("detail %q does not carry %q", detail, f.note)
			}
			t.Logf("public: %s\ndetail: %s", g.Response.Error, detail)
		})
	}
}

// Triage meets a store outage first: its answer on giving up is as plain.
func TestTriageStoreOutageIsPublic(t *testing.T) {
	addr := closedAddr(t)
	cfg := s3.DefaultConfig()
	cfg.Endpoint, cfg.AccessKey, cfg.SecretKey, cfg.MaxRetries = addr, "key", "secretsecret", 1
	st, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := newFixture(t)
	p, err := New(f.cfg, Deps{Store: st, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
	if err != nil {
		t.Fatal(err)
	}
	g := gaveUp(t, f.req, p.Triage(context.Background(), f.req))
	if want := "gave up after 3 deliveries: downloading: the object store could not be reached"; g.Response.Error != want {
		t.Errorf("%q, want %q", g.Response.Error, want)
	}
	if !strings.Contains(ErrorDetail(g.Err), addr) {
		t.Errorf("detail %q does not name the endpoint %s", ErrorDetail(g.Err), addr)
	}
}

// Causes that are not the pipeline's own: the max-deliveries advisory's sentence is kept; an error
// chain from elsewhere is replaced by what failed.
func TestPublicMessageOfOtherErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("the worker handling delivery 3 of 3 stopped answering (crashed or cut off)"),
			"the worker handling delivery 3 of 3 stopped answering (crashed or cut off)"},
		{fmt.Errorf("pinging clamd: %w", &scanner.Error{Kind: scanner.Unavailable, Op: "dialing", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}),
			"the virus scanner could not be reached"},
		{fmt.Errorf("publishing to app.x: %w", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}), "the worker could not be reached"},
		{fmt.Errorf("reading /tmp/x/input: %w", syscall.ENOSPC), "the scratch disk is full"},
		{fmt.Errorf("something: %w: %w", errors.New("a"), errors.New("b/c")), "the worker failed"},
		{&contracts.ParseError{Field: "s3Key", Correlatable: true, Reason: `must not start with "/"`}, `invalid request: s3Key must not start with "/"`},
	} {
		if got := PublicMessage(tc.err); got != tc.want {
			t.Errorf("PublicMessage(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A permanent failure is about the input and keeps its words; should one name the job's scratch
// file, the response names the file only.
func TestPermanentFailureNamesNoScratchPath(t *testing.T) {
	f := newFixture(t)
	f.images.badInputPath = true
	out := f.run(t)
	if out.Kind != Failed {
		t.Fatalf("kind %s, want failed (%v)", out.Kind, out.Err)
	}
	if want := "transforming: cannot decode input: truncated"; out.Response.Error != want {
		t.Errorf("%q, want %q", out.Response.Error, want)
	}
	if !strings.Contains(ErrorDetail(out.Err), f.cfg.TmpDir) {
		t.Errorf("detail %q lost the path", ErrorDetail(out.Err))
	}

	// The request's own key is echoed as it is, even where it reads like --tmp-dir.
	f = newFixture(t)
	f.req.S3Key = "u" + f.cfg.TmpDir + "/p.jpg"
	out = f.run(t)
	if want := `downloading: object "` + f.req.S3Key + `" not found in bucket "media"`; out.Kind != Failed || out.Response.Error != want {
		t.Errorf("%s %q, want %q", out.Kind, out.Response.Error, want)
	}
}

// The tool's words about the input go with the chain to the private side.
func TestErrorDetailKeepsTheToolsWords(t *testing.T) {
	f := newFixture(t)
	f.images.err = transcoderBadInputSaid("transforming image: the image could not be decoded", "VipsJpeg: Premature end of JPEG file")
	out := f.run(t)
	if out.Kind != Failed || out.Response.Error != "transforming: transforming image: the image could not be decoded" {
		t.Fatalf("%s %q", out.Kind, out.Response.Error)
	}
	if d := ErrorDetail(out.Err); !strings.Contains(d, "VipsJpeg: Premature end of JPEG file") || !strings.HasPrefix(d, out.Response.Error) {
		t.Errorf("detail %q", d)
	}
}

// transcoderBadInputSaid is the transcoder's bad input with its tool's words in Detail.
func transcoderBadInputSaid(msg, said string) error {
	return &transcoder.Error{BadInput: true, Msg: msg, Detail: said}
}

// A clamd refusal that reaches PublicMessage bare (the scan API's 422) says what could not be scanned,
// in the words the scanner set where it refused, and nothing of its cause's text.
func TestPublicMessageOfAScanRefusal(t *testing.T) {
	err := &scanner.Error{Kind: scanner.LimitExceeded, Op: "scanning stream", Err: errors.New("reply from /run/clamd.ctl"),
		Words: "clamd could not scan the whole input: Heuristics.Limits.Exceeded.MaxRecursion"}
	want := "the file cannot be scanned: scanning stream: over the scan limits: clamd could not scan the whole input: Heuristics.Limits.Exceeded.MaxRecursion"
	if got := PublicMessage(fmt.Errorf("scanning: %w", err)); got != want {
		t.Errorf("PublicMessage = %q, want %q", got, want)
	}
}
