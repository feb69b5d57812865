package deploy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The parts of the Kubernetes objects the invariants look at, one type per kind. Unknown fields are
// ignored here; the full schemas are checked by `kubectl apply --dry-run=server` or kubeconform where a
// cluster or the schemas are at hand.
type manifests struct {
	ConfigMap struct {
		Metadata objectMeta        `yaml:"metadata"`
		Data     map[string]string `yaml:"data"`
	}
	Deployment struct {
		Spec struct {
			Replicas int `yaml:"replicas"`
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Strategy struct {
				RollingUpdate struct {
					MaxSurge int `yaml:"maxSurge"`
				} `yaml:"rollingUpdate"`
			} `yaml:"strategy"`
			Template struct {
				Metadata objectMeta `yaml:"metadata"`
				Spec     podSpec    `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	Service struct {
		Spec struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []struct {
				Name       string `yaml:"name"`
				TargetPort string `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	Kustomization struct {
		Resources []string `yaml:"resources"`
	}
	// clamd's objects (clamd.yaml), the worker's disruption budget and network policy (policy.yaml).
	ClamdConfig struct {
		Data map[string]string `yaml:"data"`
	}
	Clamd struct {
		Spec struct {
			Template struct {
				Metadata objectMeta `yaml:"metadata"`
				Spec     podSpec    `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	ClamdService struct {
		Metadata objectMeta `yaml:"metadata"`
		Spec     struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []struct {
				Port int `yaml:"port"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	PodDisruptionBudget struct {
		Spec struct {
			MaxUnavailable *int `yaml:"maxUnavailable"`
			Selector       struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		} `yaml:"spec"`
	}
	NetworkPolicy struct {
		Spec struct {
			PodSelector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"podSelector"`
			PolicyTypes []string `yaml:"policyTypes"`
			Ingress     []struct {
				Ports []struct {
					Port int `yaml:"port"`
				} `yaml:"ports"`
			} `yaml:"ingress"`
			Egress []struct {
				Ports []struct {
					Port int `yaml:"port"`
				} `yaml:"ports"`
			} `yaml:"egress"`
		} `yaml:"spec"`
	}
	kinds map[string]bool
}

type objectMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    int   `yaml:"runAsUser"`
		RunAsGroup   int   `yaml:"runAsGroup"`
		FSGroup      int   `yaml:"fsGroup"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name     string `yaml:"name"`
		EmptyDir *struct {
			SizeLimit string `yaml:"sizeLimit"`
		} `yaml:"emptyDir"`
	} `yaml:"volumes"`
}

type container struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	StartupProbe   *probe `yaml:"startupProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

// loadK8s parses every document of every YAML file in k8s/ and returns them with the file names.
func loadK8s(t *testing.T) (manifests, []string) {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in k8s/: %v", err)
	}
	m := manifests{kinds: map[string]bool{}}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var node yaml.Node
			if err := dec.Decode(&node); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var head struct {
				APIVersion string     `yaml:"apiVersion"`
				Kind       string     `yaml:"kind"`
				Metadata   objectMeta `yaml:"metadata"`
			}
			if err := node.Decode(&head); err != nil || head.APIVersion == "" || head.Kind == "" {
				t.Fatalf("%s: a document without apiVersion or kind (%v)", f, err)
			}
			// The worker's objects by kind; clamd's (named clamav) by their own name.
			kind := head.Kind
			if head.Metadata.Name == "clamav" {
				kind = "clamav " + kind
			}
			if m.kinds[kind] {
				t.Fatalf("%s: a second %s; this test expects one of each", f, kind)
			}
			m.kinds[kind] = true
			var target any
			switch kind {
			case "ConfigMap":
				target = &m.ConfigMap
			case "Deployment":
				target = &m.Deployment
			case "Service":
				target = &m.Service
			case "Kustomization":
				target = &m.Kustomization
			case "clamav ConfigMap":
				target = &m.ClamdConfig
			case "clamav Deployment":
				target = &m.Clamd
			case "clamav Service":
				target = &m.ClamdService
			case "PodDisruptionBudget":
				target = &m.PodDisruptionBudget
			case "NetworkPolicy":
				target = &m.NetworkPolicy
			default:
				t.Fatalf("%s: unexpected kind %s", f, kind)
			}
			if err := node.Decode(target); err != nil {
				t.Fatalf("%s: %s: %v", f, head.Kind, err)
			}
		}
	}
	return m, files
}

func TestKubernetesManifests(t *testing.T) {
	m, files := loadK8s(t)
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "Kustomization", "PodDisruptionBudget", "NetworkPolicy",
		"clamav ConfigMap", "clamav Deployment", "clamav Service"} {
		if !m.kinds[kind] {
			t.Fatalf("k8s/ has no %s", kind)
		}
	}
	cm, dep, svc := m.ConfigMap, m.Deployment, m.Service

	// The kustomization applies every other manifest.
	var listed []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			listed = append(listed, filepath.Base(f))
		}
	}
	if !sameSet(listed, m.Kustomization.Resources) {
		t.Errorf("kustomization resources %v, want %v", m.Kustomization.Resources, listed)
	}

	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]string{}
	for k, v := range cm.Data {
		env[k] = v
	}
	explicit := map[string]bool{}
	for _, e := range c.Env {
		explicit[e.Name] = true
		if e.ValueFrom == nil {
			env[e.Name] = e.Value // env beats envFrom
		}
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != cm.Metadata.Name {
		t.Errorf("the container must take its settings from ConfigMap %q", cm.Metadata.Name)
	}

	// Draining: the kubelet's SIGKILL must come after the drain timeout.
	if !explicit["MW_DRAIN_TIMEOUT"] {
		t.Error("MW_DRAIN_TIMEOUT must be set explicitly in the Deployment, next to terminationGracePeriodSeconds")
	}
	drain := mustDuration(t, "MW_DRAIN_TIMEOUT", env["MW_DRAIN_TIMEOUT"])
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	if grace < drain+drainMargin {
		t.Errorf("terminationGracePeriodSeconds %s must exceed MW_DRAIN_TIMEOUT %s by at least %s", grace, drain, drainMargin)
	}

	// Probes hit the worker's endpoints on the port it serves.
	_, httpPort, err := net.SplitHostPort(env["MW_HTTP_ADDR"])
	if err != nil {
		t.Fatalf("MW_HTTP_ADDR: %v", err)
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, pr := range map[string]struct {
		p    *probe
		path string
	}{
		"liveness":  {c.LivenessProbe, "/health/live"},
		"readiness": {c.ReadinessProbe, "/health/ready"},
		"startup":   {c.StartupProbe, "/health/live"},
	} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("no %s probe", name)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path {
			t.Errorf("%s probe path %q, want %q", name, pr.p.HTTPGet.Path, pr.path)
		}
		if strconv.Itoa(ports[pr.p.HTTPGet.Port]) != httpPort {
			t.Errorf("%s probe port %q is not the worker's HTTP port %s", name, pr.p.HTTPGet.Port, httpPort)
		}
	}

	if err := scanAPIGuarded(env["MW_HTTP_ADDR"], env["MW_SCAN_API"], explicit["MW_SCAN_API_TOKEN"] || env["MW_SCAN_API_TOKEN"] != ""); err != nil {
		t.Error(err)
	}
	// NATS with a credential, and every secret from a Secret, never written in a manifest.
	if !explicit["MW_NATS_PASSWORD"] && !explicit["MW_NATS_CREDS"] && env["MW_NATS_CREDS"] == "" {
		t.Error("the worker connects to NATS without a credential (MW_NATS_USER/MW_NATS_PASSWORD or MW_NATS_CREDS)")
	}
	for _, e := range c.Env {
		for _, secret := range []string{"PASSWORD", "SECRET", "TOKEN"} {
			if strings.Contains(e.Name, secret) && e.ValueFrom == nil {
				t.Errorf("%s is written in the Deployment; take it from a Secret", e.Name)
			}
		}
	}
	for k := range cm.Data {
		for _, secret := range []string{"PASSWORD", "SECRET", "TOKEN"} {
			if strings.Contains(k, secret) {
				t.Errorf("%s is in the ConfigMap; take it from a Secret", k)
			}
		}
	}

	for _, r := range []string{"cpu", "memory", "ephemeral-storage"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("no %s request", r)
		}
		if c.Resources.Limits[r] == "" {
			t.Errorf("no %s limit", r)
		}
	}

	// Non-root, read-only root filesystem; scratch and /tmp on emptyDirs.
	if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("pod securityContext.runAsNonRoot must be true")
	}
	sc := c.SecurityContext
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("container securityContext.readOnlyRootFilesystem must be true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("container securityContext.allowPrivilegeEscalation must be false")
	}
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		emptyDirs[v.Name] = v.EmptyDir != nil
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		if emptyDirs[m.Name] {
			mounts = append(mounts, m.MountPath)
		}
	}
	for _, dir := range []string{env["MW_TMP_DIR"], "/tmp"} {
		if !onMount(dir, mounts) {
			t.Errorf("%s is not on an emptyDir (mounts %v); the root filesystem is read-only", dir, mounts)
		}
	}

	// Scaling: the shared consumers' cap follows the one rule (docs/operations.md): at least 2 × a lane's
	// slots of all pods, the surge pod included.
	slots := max(atoi(t, env["MW_MAX_IMAGE_JOBS"]), atoi(t, env["MW_MAX_VIDEO_JOBS"]))
	pods := dep.Spec.Replicas + dep.Spec.Strategy.RollingUpdate.MaxSurge
	if got, need := atoi(t, env["MW_MAX_ACK_PENDING"]), 2*pods*slots; got < need {
		t.Errorf("MW_MAX_ACK_PENDING %d < 2 × %d pods × %d slots of the largest lane", got, pods, slots)
	}

	// Selectors line up.
	tmpl := dep.Spec.Template.Metadata.Labels
	if !subset(dep.Spec.Selector.MatchLabels, tmpl) {
		t.Errorf("Deployment selector %v does not match its pod labels %v", dep.Spec.Selector.MatchLabels, tmpl)
	}
	if len(svc.Spec.Selector) == 0 || !subset(svc.Spec.Selector, tmpl) {
		t.Errorf("Service selector %v does not select the worker's pods %v", svc.Spec.Selector, tmpl)
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort]; !ok {
			t.Errorf("Service port %q targets %q, which the container does not name", p.Name, p.TargetPort)
		}
	}

	checkSettingNames(t, "k8s", keys(env))
}
