package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/rs/zerolog"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHealthEndpointsAndMetrics(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	base := "http://" + w.app.HTTPAddr()

	if code, body := get(t, base+"/health/live"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Fatalf("live: %d %s", code, body)
	}
	code, body := get(t, base+"/health/ready")
	if code != 200 {
		t.Fatalf("ready: %d %s", code, body)
	}
	for _, check := range []string{"nats", "consumer", "object_store", "clamd", "clamd_signatures", "scratch_disk"} {
		if !strings.Contains(body, `"name": "`+check+`"`) {
			t.Errorf("readiness lacks the %s check: %s", check, body)
		}
	}
	var health struct {
		Lanes     string
		Jobs      map[string]struct{ Active, Max int }
		Consumers map[string]struct{ Durable string }
		Clamd     struct {
			Engine          string
			DevDatabase     bool
			MaxSignatureAge string
		}
	}
	_, body = get(t, base+"/health")
	if err := json.Unmarshal([]byte(body), &health); err != nil || health.Lanes != "image,video" ||
		health.Jobs["image"].Max != 2 || health.Jobs["video"].Max != 1 || health.Jobs["triage"].Max < 1 ||
		health.Consumers["triage"].Durable != "mediaworker" || health.Consumers["image"].Durable != "mediaworker-image" ||
		health.Consumers["video"].Durable != "mediaworker-video" {
		t.Fatalf("health: %v %s", err, body)
	}
	// The test clamd has only the dev database: /health says so instead of inventing a date.
	if c := health.Clamd; !strings.HasPrefix(c.Engine, "1.") || !c.DevDatabase || c.MaxSignatureAge != "72h0m0s" {
		t.Errorf("health's clamd: %+v in %s", c, body)
	}

	// One job moves every metric the operations guide lists.
	id := w.request(w.upload(testenv.MakeJPEG(t, t.TempDir(), 800, 600), "m/p.jpg"))
	if r := w.await(id, time.Minute); !r.Success {
		t.Fatalf("%+v", r)
	}
	wants := []string{
		`mediaworker_jobs_total{kind="image",outcome="success"} 1`,
		`mediaworker_jobs_total{kind="image",outcome="routed"} 1`,
		`mediaworker_stage_duration_seconds_count{kind="image",stage="triaging"} 1`,
		`mediaworker_stage_duration_seconds_count{kind="image",stage="transforming"} 1`,
		`mediaworker_stage_duration_seconds_count{kind="image",stage="uploading"} 1`,
		`mediaworker_stage_duration_seconds_count{kind="unknown",stage="downloading"} 1`,
		`mediaworker_stage_duration_seconds_count{kind="unknown",stage="scanning"} 1`,
		`mediaworker_stage_duration_seconds_count{kind="any",stage="publishing"} 2`, // to the lane, the response
		`mediaworker_scan_verdicts_total{verdict="clean"} 1`,
		`mediaworker_bytes_total{direction="in"}`,
		`mediaworker_bytes_total{direction="out"}`,
		`mediaworker_jobs_in_flight{lane="video"} 0`,
		`mediaworker_lane_slots{lane="image"} 2`,
		`mediaworker_redeliveries_total 0`,
		`mediaworker_clamd_signature_age_seconds NaN`, // dev database: no date to judge
	}
	// The job is counted when it is settled, a moment after its response is out.
	testenv.Eventually(t, 10*time.Second, func() error {
		_, metrics := get(t, base+"/metrics")
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})

	// Readiness names the failing dependency.
	clamd.Stop()
	code, body = get(t, base+"/health/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: clamd") {
		t.Fatalf("with clamd stopped: %d %s", code, body)
	}
	// The dependency watcher notices too (within its 10 s interval) and /health says intake is paused.
	testenv.Eventually(t, 20*time.Second, func() error {
		var h struct {
			Intake struct {
				Paused bool
				Down   []string
			}
		}
		_, body := get(t, base+"/health")
		if err := json.Unmarshal([]byte(body), &h); err != nil || !h.Intake.Paused || len(h.Intake.Down) != 1 || !strings.HasPrefix(h.Intake.Down[0], "clamd: ") {
			return fmt.Errorf("intake while clamd is down: %v %+v", err, h.Intake)
		}
		return nil
	})
	clamd.Start()
	testenv.Eventually(t, 10*time.Second, func() error {
		if code, _ := get(t, base+"/health/ready"); code != 200 {
			return fmt.Errorf("ready answers %d", code)
		}
		return nil
	})
}

func TestScanAPI(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) {
		c.ScanAPI.Token = "s3cret"
		c.ScanAPI.MaxBytes = 1 << 20
	})
	url := "http://" + w.app.HTTPAddr() + "/v1/scan"
	post := func(body, token string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	if code, v := post("hello", "s3cret"); code != 200 || v["clean"] != true {
		t.Errorf("clean: %d %v", code, v)
	}
	if code, v := post("prefix "+testenv.EICAR, "s3cret"); code != 200 || v["infected"] != true || v["virusName"] != testenv.EICARSignature {
		t.Errorf("infected: %d %v", code, v)
	}
	if code, v := post(strings.Repeat("a", 1<<20+1), "s3cret"); code != http.StatusRequestEntityTooLarge || !strings.Contains(fmt.Sprint(v["error"]), "limit is") {
		t.Errorf("over cap: %d %v", code, v)
	}
	if code, _ := post("hello", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	if code, _ := post("hello", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}
	clamd.Stop()
	if code, v := post("hello", "s3cret"); code != http.StatusServiceUnavailable || v["clean"] == true {
		t.Errorf("clamd down: %d %v", code, v)
	}
}

func TestReadinessNamesTheObjectStore(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageS3, clamd, nil)
	base := "http://" + w.app.HTTPAddr()
	if code, body := get(t, base+"/health/ready"); code != 200 {
		t.Fatalf("ready: %d %s", code, body)
	}
	w.s3.Stop()
	code, body := get(t, base+"/health/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: object_store") {
		t.Fatalf("with the S3 server stopped: %d %s", code, body)
	}
	w.s3.Start()
	testenv.Eventually(t, 20*time.Second, func() error {
		if code, _ := get(t, base+"/health/ready"); code != 200 {
			return fmt.Errorf("ready answers %d", code)
		}
		return nil
	})
}

// Readiness with S3 credentials that cannot work — none, a wrong secret, a key S3 does not know — is not
// 200, and says which settings to change: otherwise a load balancer sends the worker requests and every
// job retries "Access Denied" until it is dead-lettered. The same worker with the right keys is ready.
func TestReadinessRefusesWrongS3Credentials(t *testing.T) {
	clamd := testenv.StartClamd(t)
	minio := testenv.StartMinIO(t)
	for _, tc := range []struct{ name, key, secret string }{
		{"no credentials", "", ""},
		{"wrong secret", minio.AccessKey, "not-the-secret-key"},
		{"unknown key", "nobody-here", "not-the-secret-key"},
		{"right credentials", minio.AccessKey, minio.SecretKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.StartNATS(t)
			cfg := app.DefaultConfig()
			cfg.NATS.URL = srv.ClientURL()
			cfg.Storage = app.StorageS3
			cfg.S3.Endpoint, cfg.S3.AccessKey, cfg.S3.SecretKey = minio.Endpoint, tc.key, tc.secret
			cfg.Scanner.Addr = clamd.Addr
			cfg.Pipeline.TmpDir = t.TempDir()
			cfg.HTTPAddr = "127.0.0.1:0"
			a := runApp(t, cfg, zerolog.InfoLevel)
			code, body := get(t, "http://"+a.HTTPAddr()+"/health/ready")
			if tc.key == minio.AccessKey && tc.secret == minio.SecretKey {
				if code != http.StatusOK {
					t.Fatalf("with the right credentials: %d %s", code, body)
				}
				return
			}
			if code == http.StatusOK || !strings.Contains(body, "not ready: object_store") ||
				!strings.Contains(body, "--s3-access-key") || !strings.Contains(body, "MW_S3_SECRET_KEY") {
				t.Fatalf("readiness with %s: %d %s, want 503 naming object_store and the credential settings", tc.name, code, body)
			}
			t.Logf("%s: %d %s", tc.name, code, body)
		})
	}
}
