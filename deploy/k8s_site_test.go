package deploy

import (
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clamdBytes reads a clamd.conf size ("512M", "1024M", "2G", bytes without a suffix).
func clamdBytes(t *testing.T, v string) int64 {
	t.Helper()
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "M"):
		mult, v = 1<<20, strings.TrimSuffix(v, "M")
	case strings.HasSuffix(v, "G"):
		mult, v = 1<<30, strings.TrimSuffix(v, "G")
	case strings.HasSuffix(v, "K"):
		mult, v = 1<<10, strings.TrimSuffix(v, "K")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("clamd.conf size %q: %v", v, err)
	}
	return n * mult
}

// What a site runs beside the worker, as shipped in k8s/: clamd with the limits the worker needs behind
// the Service MW_CLAMD_ADDR names, a disruption budget, the NetworkPolicy SECURITY.md asks for, and a
// startup probe that outlasts the clamd wait.
func TestKubernetesSiteObjects(t *testing.T) {
	m, _ := loadK8s(t)
	cm := m.ConfigMap.Data
	workerLabels := m.Deployment.Spec.Template.Metadata.Labels

	// clamd: the Service the worker's address names, selecting clamd's pods, on its port.
	u, err := url.Parse(cm["MW_CLAMD_ADDR"])
	if err != nil || u.Scheme != "tcp" {
		t.Fatalf("MW_CLAMD_ADDR %q: want tcp://<service>:<port>", cm["MW_CLAMD_ADDR"])
	}
	if u.Hostname() != m.ClamdService.Metadata.Name || len(m.ClamdService.Spec.Ports) != 1 || strconv.Itoa(m.ClamdService.Spec.Ports[0].Port) != u.Port() {
		t.Errorf("MW_CLAMD_ADDR %s does not name the clamd Service %s:%v", u, m.ClamdService.Metadata.Name, m.ClamdService.Spec.Ports)
	}
	if !subset(m.ClamdService.Spec.Selector, m.Clamd.Spec.Template.Metadata.Labels) {
		t.Errorf("the clamd Service %v does not select clamd's pods %v", m.ClamdService.Spec.Selector, m.Clamd.Spec.Template.Metadata.Labels)
	}
	// clamd.conf: what it cannot scan is reported, and it scans everything the worker accepts.
	conf := map[string]string{}
	for _, l := range strings.Split(m.ClamdConfig.Data["clamd.conf"], "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			conf[f[0]] = f[1]
		}
	}
	if conf["AlertExceedsMax"] != "yes" {
		t.Error("clamd.conf must say AlertExceedsMax yes: its defaults report files above its limits as clean")
	}
	maxInput := regexp.MustCompile(`^(\d+)MiB$`).FindStringSubmatch(cm["MW_MAX_INPUT_BYTES"])
	if maxInput == nil {
		t.Fatalf("MW_MAX_INPUT_BYTES %q: this test reads <n>MiB", cm["MW_MAX_INPUT_BYTES"])
	}
	n, _ := strconv.ParseInt(maxInput[1], 10, 64)
	for _, k := range []string{"StreamMaxLength", "MaxFileSize", "MaxScanSize"} {
		if v, ok := conf[k]; !ok || clamdBytes(t, v) < n<<20 {
			t.Errorf("clamd.conf %s = %q, below MW_MAX_INPUT_BYTES %s", k, v, cm["MW_MAX_INPUT_BYTES"])
		}
	}
	if c := m.Clamd.Spec.Template.Spec.Containers; len(c) != 1 || c[0].Resources.Limits["memory"] == "" || c[0].Resources.Requests["memory"] == "" {
		t.Error("clamd's container needs memory requests and limits (its databases take ~1.5 GiB, twice while reloading)")
	}

	// The budget and the policy are about the worker's pods.
	if !subset(m.PodDisruptionBudget.Spec.Selector.MatchLabels, workerLabels) || m.PodDisruptionBudget.Spec.MaxUnavailable == nil ||
		*m.PodDisruptionBudget.Spec.MaxUnavailable >= m.Deployment.Spec.Replicas {
		t.Errorf("the PodDisruptionBudget must select the worker's pods and keep one of %d running", m.Deployment.Spec.Replicas)
	}
	np := m.NetworkPolicy.Spec
	if !subset(np.PodSelector.MatchLabels, workerLabels) || !slices.Contains(np.PolicyTypes, "Ingress") || !slices.Contains(np.PolicyTypes, "Egress") {
		t.Errorf("the NetworkPolicy must select the worker's pods and restrict ingress and egress: %+v", np)
	}
	var in, out []int
	for _, r := range np.Ingress {
		for _, p := range r.Ports {
			in = append(in, p.Port)
		}
	}
	for _, r := range np.Egress {
		for _, p := range r.Ports {
			out = append(out, p.Port)
		}
	}
	_, httpPort, _ := strings.Cut(cm["MW_HTTP_ADDR"], ":")
	if len(in) != 1 || strconv.Itoa(in[0]) != httpPort {
		t.Errorf("the NetworkPolicy admits ports %v; want only the worker's HTTP port %s", in, httpPort)
	}
	natsURL, _ := url.Parse(cm["MW_NATS_URL"])
	for _, p := range []string{"53", natsURL.Port(), u.Port()} {
		if !slices.Contains(out, atoi(t, p)) {
			t.Errorf("the NetworkPolicy lets the worker reach ports %v, not %s", out, p)
		}
	}

	// Start-up: the probe's window exceeds the clamd wait (the worker's own error comes first).
	sp := m.Deployment.Spec.Template.Spec.Containers[0].StartupProbe
	wait := 2 * time.Minute
	if v := cm["MW_CLAMD_WAIT"]; v != "" {
		wait = mustDuration(t, "MW_CLAMD_WAIT", v)
	}
	if window := time.Duration(sp.PeriodSeconds*sp.FailureThreshold) * time.Second; window <= wait {
		t.Errorf("the startup probe gives up after %s, within the clamd wait %s", window, wait)
	}
}
