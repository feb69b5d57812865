package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The worker's S3 account in these tests, as deploy/.env would hold it.
const (
	s3WorkerAccess = "mediaworker-worker"
	s3WorkerSecret = "worker-secret-0123456789abcdef"
)

// composeS3 starts versitygw as compose.yaml's s3 service runs it (internal IAM) and runs the s3-init
// service's script, as written in compose.yaml, against it: once on a store where root already made the
// media bucket (as `mediaworker submit` or an older s3-init did), once more as on a restart with a new
// secret in .env. It returns the gateway and the worker account's keys after both runs.
func composeS3(t *testing.T) (gw *testenv.VersityGW, access, secret string) {
	t.Helper()
	c := loadCompose(t)
	s3, initSvc := c.Services["s3"], c.Services["s3-init"]
	if !slices.Contains(s3.Command, "--iam-dir") {
		t.Fatalf("compose s3 runs %q without --iam-dir: versitygw then knows only its root account", s3.Command)
	}
	if initSvc.Image != s3.Image {
		t.Errorf("s3-init runs %q, want the s3 service's image %q (its `versitygw admin` CLI)", initSvc.Image, s3.Image)
	}
	if !slices.Equal(initSvc.Entrypoint, []string{"/bin/sh", "-c"}) || len(initSvc.Command) != 1 {
		t.Fatalf("s3-init: entrypoint %q, command %q: want /bin/sh -c and one script", initSvc.Entrypoint, initSvc.Command)
	}
	if u, err := url.Parse(initSvc.Environment["ADMIN_ENDPOINT_URL"]); err != nil || u.Hostname() != "s3" ||
		!slices.Contains(s3.Command, ":"+u.Port()) {
		t.Errorf("s3-init's ADMIN_ENDPOINT_URL %q is not the s3 service's port (%q)", initSvc.Environment["ADMIN_ENDPOINT_URL"], s3.Command)
	}
	// compose.yaml's values are ${VAR…} of .env; these stand for them, the endpoint for the s3 host.
	gw = testenv.StartVersityGW(t, testenv.VersityGWOptions{IAM: true})
	vals := map[string]string{"ADMIN_ENDPOINT_URL": gw.URL(), "ADMIN_ACCESS_KEY": gw.AccessKey,
		"ADMIN_SECRET_KEY": gw.SecretKey, "S3_WORKER_ACCESS_KEY": s3WorkerAccess, "MEDIA_BUCKET": "media"}
	script := strings.ReplaceAll(initSvc.Command[0], "$$", "$")

	// versitygw on PATH, as in the image.
	bin := t.TempDir()
	if err := os.Symlink(testenv.VersityGWBinary(t), filepath.Join(bin, "versitygw")); err != nil {
		t.Fatal(err)
	}
	run := func(secret string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", script)
		cmd.Env = []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		for k := range initSvc.Environment {
			v, ok := vals[k]
			if k == "S3_WORKER_SECRET_KEY" {
				v, ok = secret, true
			}
			if !ok {
				t.Fatalf("s3-init reads %s, which this test does not know", k)
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("s3-init's script: %v\n%s", err, out)
		}
	}
	root := client(t, gw, gw.AccessKey, gw.SecretKey)
	if err := root.MakeBucket(context.Background(), "media", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	run("first-secret-0123456789abcdef")
	run(s3WorkerSecret)
	return gw, s3WorkerAccess, s3WorkerSecret
}

func client(t *testing.T, gw *testenv.VersityGW, access, secret string) *minio.Client {
	t.Helper()
	c, err := minio.New(gw.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""),
		Region: "us-east-1", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The account compose's s3-init makes for the worker does in the media bucket what the worker does
// (put, stat, get, copy, list, delete; also objects the API uploaded with root's keys), and nothing in
// a bucket it does not own; the secret a restart brought replaced the old one.
func TestComposeS3WorkerAccount(t *testing.T) {
	gw, access, secret := composeS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, w := client(t, gw, gw.AccessKey, gw.SecretKey), client(t, gw, access, secret)
	put := func(c *minio.Client, bucket, key string) error {
		_, err := c.PutObject(ctx, bucket, key, strings.NewReader("bytes of "+key), int64(len("bytes of "+key)),
			minio.PutObjectOptions{ContentType: "image/jpeg"})
		return err
	}

	if err := put(root, "media", "uploads/by-api.jpg"); err != nil {
		t.Fatal(err)
	}
	if err := put(w, "media", "variants/v.jpg"); err != nil {
		t.Fatalf("worker account put in media: %v", err)
	}
	for _, key := range []string{"uploads/by-api.jpg", "variants/v.jpg"} {
		if _, err := w.StatObject(ctx, "media", key, minio.StatObjectOptions{}); err != nil {
			t.Errorf("worker account stat media/%s: %v", key, err)
		}
		if b, err := readObject(ctx, w, "media", key); err != nil || string(b) != "bytes of "+key {
			t.Errorf("worker account get media/%s: %q, %v", key, b, err)
		}
	}
	if _, err := w.CopyObject(ctx, minio.CopyDestOptions{Bucket: "media", Object: "variants/copy.jpg"},
		minio.CopySrcOptions{Bucket: "media", Object: "uploads/by-api.jpg"}); err != nil {
		t.Errorf("worker account copy in media: %v", err)
	}
	var keys []string
	for o := range w.ListObjects(ctx, "media", minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("worker account list media: %v", o.Err)
		}
		keys = append(keys, o.Key)
	}
	if want := []string{"uploads/by-api.jpg", "variants/copy.jpg", "variants/v.jpg"}; !slices.Equal(keys, want) {
		t.Errorf("worker account lists media as %q, want %q", keys, want)
	}
	for _, key := range keys {
		if err := w.RemoveObject(ctx, "media", key, minio.RemoveObjectOptions{}); err != nil {
			t.Errorf("worker account delete media/%s: %v", key, err)
		}
	}
	if _, err := root.StatObject(ctx, "media", "variants/v.jpg", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		t.Errorf("media/variants/v.jpg after the worker account deleted it: %v", err)
	}

	// Another tenant's bucket, made by root: refused, whatever the operation.
	if err := root.MakeBucket(ctx, "other", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := put(root, "other", "secret.jpg"); err != nil {
		t.Fatal(err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if code := minio.ToErrorResponse(err).Code; code != minio.AccessDenied {
			t.Errorf("worker account %s: %v (code %q), want AccessDenied", what, err, code)
		}
	}
	denied("put in other", put(w, "other", "planted.jpg"))
	_, err := w.StatObject(ctx, "other", "secret.jpg", minio.StatObjectOptions{})
	denied("stat in other", err)
	_, err = readObject(ctx, w, "other", "secret.jpg")
	denied("get in other", err)
	_, err = w.CopyObject(ctx, minio.CopyDestOptions{Bucket: "media", Object: "stolen.jpg"},
		minio.CopySrcOptions{Bucket: "other", Object: "secret.jpg"})
	denied("copy from other", err)
	listed := errors.New("listed with no error")
	for o := range w.ListObjects(ctx, "other", minio.ListObjectsOptions{Recursive: true}) {
		if listed = o.Err; listed != nil {
			break
		}
	}
	denied("list other", listed)
	denied("delete in other", w.RemoveObject(ctx, "other", "secret.jpg", minio.RemoveObjectOptions{}))
	if _, err := root.StatObject(ctx, "other", "secret.jpg", minio.StatObjectOptions{}); err != nil {
		t.Errorf("other/secret.jpg after the worker account's delete: %v", err)
	}

	// The first run's secret was replaced by the second's: a HEAD of a missing key is a 404 with the
	// secret, a refusal (403: HEAD has no body to say why) with the old one.
	if _, err := w.StatObject(ctx, "media", "x", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		t.Errorf("HEAD media/x with the secret: %v, want NoSuchKey", err)
	}
	old := client(t, gw, access, "first-secret-0123456789abcdef")
	if _, err := old.StatObject(ctx, "media", "x", minio.StatObjectOptions{}); minio.ToErrorResponse(err).StatusCode != 403 {
		t.Errorf("HEAD media/x with the replaced secret: %v, want 403", err)
	}
}

func readObject(ctx context.Context, c *minio.Client, bucket, key string) ([]byte, error) {
	o, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, o); err != nil {
		return nil, err
	}
	if buf.Len() == 0 {
		return nil, errors.New("empty object")
	}
	return buf.Bytes(), nil
}
