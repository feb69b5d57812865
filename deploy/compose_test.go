package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"
)

// The parts of the compose file the invariants look at. Unknown keys are ignored here; the full
// compose-spec schema is checked by `docker compose config` where the compose plugin exists.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Configs  map[string]struct {
		Content string `yaml:"content"`
	} `yaml:"configs"`
	Volumes map[string]any `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	ReadOnly        bool     `yaml:"read_only"`
	Volumes         []string `yaml:"volumes"`
	Ports           []string `yaml:"ports"`
	Configs         []struct {
		Source string `yaml:"source"`
		Target string `yaml:"target"`
	} `yaml:"configs"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("compose.yaml is not valid YAML for a compose file: %v", err)
	}
	return c
}

func TestComposeWorkerWiring(t *testing.T) {
	c := loadCompose(t)
	for _, name := range []string{"nats", "s3", "clamav", "worker"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("compose.yaml has no %q service", name)
		}
	}
	w := c.Services["worker"]

	if w.Build == nil || w.Build.Dockerfile == "" {
		t.Error("the worker must be built from the repository's Dockerfile")
	} else if _, err := os.Stat(filepath.Join(w.Build.Context, w.Build.Dockerfile)); err != nil {
		t.Errorf("worker build: %v", err)
	}
	for _, dep := range []string{"nats", "s3", "clamav"} {
		d, ok := w.DependsOn[dep]
		if !ok {
			t.Errorf("worker does not depend on %s", dep)
			continue
		}
		if d.Condition != "service_healthy" {
			t.Errorf("worker waits for %s with condition %q, want service_healthy", dep, d.Condition)
		}
		if c.Services[dep].Healthcheck == nil {
			t.Errorf("%s has no healthcheck, so service_healthy would never be reached", dep)
		}
	}

	env := w.Environment
	want := map[string]string{
		"MW_NATS_URL":   "nats://nats:4222",
		"MW_STORAGE":    "s3",
		"MW_CLAMD_ADDR": "tcp://clamav:3310",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("worker %s = %q, want %q", k, env[k], v)
		}
	}
	if host, _, _ := net.SplitHostPort(env["MW_S3_ENDPOINT"]); host != "s3" {
		t.Errorf("worker MW_S3_ENDPOINT = %q, want the s3 service", env["MW_S3_ENDPOINT"])
	}

	// The container health check asks the worker itself, on the port it serves.
	hc := w.Healthcheck
	if hc == nil || len(hc.Test) < 3 || hc.Test[1] != "mediaworker" || hc.Test[2] != "healthcheck" {
		t.Fatalf("worker healthcheck must run `mediaworker healthcheck`, got %+v", hc)
	}
	_, httpPort, err := net.SplitHostPort(env["MW_HTTP_ADDR"])
	if err != nil {
		t.Fatalf("worker MW_HTTP_ADDR: %v", err)
	}
	if i := slices.Index(hc.Test, "--http-addr"); i < 0 || !strings.HasSuffix(hc.Test[i+1], ":"+httpPort) {
		t.Errorf("healthcheck %v does not ask the worker's port %s", hc.Test, httpPort)
	}

	if err := scanAPIGuarded(env["MW_HTTP_ADDR"], env["MW_SCAN_API"], env["MW_SCAN_API_TOKEN"] != ""); err != nil {
		t.Error(err)
	}

	drain := mustDuration(t, "MW_DRAIN_TIMEOUT", env["MW_DRAIN_TIMEOUT"])
	grace := mustDuration(t, "stop_grace_period", w.StopGracePeriod)
	if grace < drain+drainMargin {
		t.Errorf("stop_grace_period %s must exceed MW_DRAIN_TIMEOUT %s by at least %s", grace, drain, drainMargin)
	}

	// Read-only root: the scratch dir must be on a volume.
	if !w.ReadOnly {
		t.Error("worker should run with read_only: true")
	}
	if !onMount(env["MW_TMP_DIR"], volumeTargets(w.Volumes)) {
		t.Errorf("MW_TMP_DIR %q is not on a volume of the worker (%v)", env["MW_TMP_DIR"], w.Volumes)
	}

	// The worker is not the store's root: it uses the account s3-init makes (deploy/s3user_test.go proves
	// what that account may do), not the keys the s3 service takes as root's. And its answers' URLs work:
	// the bucket is private, so they point at the worker's own /objects, which serves S3 variants only
	// with URL signing on.
	rootEnv := c.Services["s3"].Environment
	for _, k := range []string{"MW_S3_ACCESS_KEY", "MW_S3_SECRET_KEY"} {
		v := composeVar(env[k])
		if v == "" || v == composeVar(rootEnv["ROOT_ACCESS_KEY"]) || v == composeVar(rootEnv["ROOT_SECRET_KEY"]) {
			t.Errorf("worker %s = %q: the store's root credentials, or none; give it the bucket-scoped account", k, env[k])
		}
		if init := c.Services["s3-init"].Environment; v != composeVar(init["S3_WORKER_ACCESS_KEY"]) &&
			v != composeVar(init["S3_WORKER_SECRET_KEY"]) {
			t.Errorf("worker %s = %q is not an account s3-init makes", k, env[k])
		}
	}
	if d := w.DependsOn["s3-init"]; d.Condition != "service_completed_successfully" {
		t.Errorf("worker waits for s3-init with condition %q, want service_completed_successfully (its account)", d.Condition)
	}
	if !strings.Contains(env["MW_PUBLIC_BASE_URL"], "127.0.0.1:"+httpPort+"/objects/") || env["MW_URL_SIGNING_KEY"] == "" {
		t.Errorf("answers' URLs point at %q (signing key %q): the bucket is private; point them at the worker's /objects with MW_URL_SIGNING_KEY set",
			env["MW_PUBLIC_BASE_URL"], env["MW_URL_SIGNING_KEY"])
	}

	checkSettingNames(t, "compose.yaml worker", keys(env))
}

// composeVar is the variable a compose value ${VAR…} interpolates, or "" for any other value.
func composeVar(v string) string {
	if !strings.HasPrefix(v, "${") {
		return ""
	}
	v = strings.TrimPrefix(v, "${")
	if i := strings.IndexAny(v, ":-?}"); i >= 0 {
		v = v[:i]
	}
	return v
}

func TestComposeNATSConfig(t *testing.T) {
	c := loadCompose(t)
	n := c.Services["nats"]
	tag := n.Image[strings.LastIndex(n.Image, ":")+1:]
	if !atLeast(tag, 2, 14) {
		t.Errorf("nats image %q: the worker needs nats-server ≥ 2.14", n.Image)
	}
	content := mountedConfig(t, c, n, "nats-conf")
	dir := t.TempDir()
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	// The accounts file it includes, mounted beside it, with the passwords its environment provides.
	accounts, err := os.ReadFile("nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600)
	for _, v := range []string{"NATS_WORKER_PASSWORD", "NATS_API_PASSWORD", "NATS_OPS_PASSWORD"} {
		if !strings.HasPrefix(n.Environment[v], "${"+v+":?") {
			t.Errorf("nats %s = %q: want it required from the environment (${%s:?…}), never a default", v, n.Environment[v], v)
		}
		t.Setenv(v, "test-"+v)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the nats-server config in compose.yaml does not parse: %v", err)
	}
	if !opts.JetStream {
		t.Error("JetStream is not enabled in the compose nats-server config")
	}
	if !opts.SyncAlways {
		t.Error("a single-server site should set sync_interval: always (see docs/operations.md)")
	}
	for _, p := range n.Ports {
		if strings.HasSuffix(p, ":4222") && !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("port %q publishes NATS beyond loopback", p)
		}
	}
	// Every client authenticates, with its own least-privilege user.
	if opts.NoAuthUser != "" || len(opts.Users) != 3 {
		t.Errorf("nats users %d, no_auth_user %q: want the three users of nats/accounts.conf and no anonymous access", len(opts.Users), opts.NoAuthUser)
	}
	for _, u := range opts.Users {
		if u.Permissions == nil || u.Password == "" || strings.HasPrefix(u.Password, "$") {
			t.Errorf("nats user %s has no permissions or an unresolved password", u.Username)
		}
	}
	w := c.Services["worker"].Environment
	if w["MW_NATS_USER"] != "worker" || !strings.HasPrefix(w["MW_NATS_PASSWORD"], "${NATS_WORKER_PASSWORD:?") {
		t.Errorf("the worker connects as %q with %q; want the worker user with NATS_WORKER_PASSWORD", w["MW_NATS_USER"], w["MW_NATS_PASSWORD"])
	}
	// No secret has a value written in the file.
	raw, _ := os.ReadFile("compose.yaml")
	for _, secret := range []string{"PASSWORD", "SECRET", "TOKEN"} {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ": "); ok && !strings.HasPrefix(k, "#") && strings.Contains(k, secret) &&
				!strings.HasPrefix(v, "${") {
				t.Errorf("compose.yaml writes a secret: %s", line)
			}
			if strings.Contains(line, secret) && strings.Contains(line, ":-") {
				t.Errorf("compose.yaml gives a secret a default: %s", line)
			}
		}
	}
}

func TestComposeClamdConfig(t *testing.T) {
	c := loadCompose(t)
	cl := c.Services["clamav"]
	if !strings.HasPrefix(cl.Image, "clamav/clamav:") {
		t.Errorf("clamav image %q: use the official image, which runs freshclam and clamd", cl.Image)
	}
	conf := parseClamdConf(mountedConfig(t, c, cl, "clamd"))

	// clamd's defaults report files above its limits as clean: the limits must cover the worker's cap.
	maxInput := int64(500 << 20) // the worker's --max-input-bytes default
	if v := c.Services["worker"].Environment["MW_MAX_INPUT_BYTES"]; v != "" {
		maxInput = clamdSize(t, v)
	}
	for _, k := range []string{"StreamMaxLength", "MaxFileSize", "MaxScanSize"} {
		if got := clamdSize(t, conf[k]); got < maxInput {
			t.Errorf("clamd %s %q is below the worker's input cap of %d bytes", k, conf[k], maxInput)
		}
	}
	if conf["AlertExceedsMax"] != "yes" {
		t.Error("clamd must set AlertExceedsMax yes, or over-limit files are reported clean")
	}
	u, err := url.Parse(c.Services["worker"].Environment["MW_CLAMD_ADDR"])
	if err != nil || u.Port() != conf["TCPSocket"] {
		t.Errorf("worker MW_CLAMD_ADDR %q does not match clamd TCPSocket %q", c.Services["worker"].Environment["MW_CLAMD_ADDR"], conf["TCPSocket"])
	}
	// The image's entrypoint waits for this socket before it reports clamd started.
	if conf["LocalSocket"] != "/tmp/clamd.sock" {
		t.Errorf("clamd LocalSocket %q: the clamav image waits for /tmp/clamd.sock", conf["LocalSocket"])
	}

	// Every directive is one the tested dev config uses, or one of the paths it leaves out on purpose, so
	// a typo (which clamd refuses at start) cannot slip in.
	raw, err := os.ReadFile("clamav/clamd.conf")
	if err != nil {
		t.Fatal(err)
	}
	known := parseClamdConf(string(raw))
	for _, k := range []string{"DatabaseDirectory", "LocalSocket", "PidFile", "User"} {
		known[k] = ""
	}
	for k := range conf {
		if _, ok := known[k]; !ok {
			t.Errorf("clamd directive %q is neither in deploy/clamav/clamd.conf nor a known path setting", k)
		}
	}
}

// mountedConfig returns the inline content of the compose config that svc mounts, found by name.
func mountedConfig(t *testing.T, c composeFile, svc composeService, name string) string {
	t.Helper()
	for _, m := range svc.Configs {
		if strings.Contains(m.Source, name) {
			cfg, ok := c.Configs[m.Source]
			if !ok || cfg.Content == "" {
				t.Fatalf("config %q is mounted but has no inline content", m.Source)
			}
			return cfg.Content
		}
	}
	t.Fatalf("no %s config is mounted", name)
	return ""
}

func parseClamdConf(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// clamdSize parses clamd's sizes (512M, 1024M, 100K, bytes) and the worker's (500MiB).
func clamdSize(t *testing.T, s string) int64 {
	t.Helper()
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"MiB", 1 << 20}, {"GiB", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"G", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("size %q: %v", s, err)
	}
	return n * mult
}
