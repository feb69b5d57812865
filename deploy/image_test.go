package deploy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The image as a site builds it: with mirror-only or air-gapped BuildKit (no `# syntax=` frontend to
// fetch), with podman (the README says --format docker, which keeps the HEALTHCHECK), from a context
// that carries neither the repository's history, nor builds, nor a developer's data and secrets, and
// running as the uid and gid the Kubernetes manifests name.
func TestDockerfileBuildsAnywhereAsTheManifestsSay(t *testing.T) {
	df := readDoc(t, "../Dockerfile")
	if regexp.MustCompile(`(?mi)^#\s*syntax\s*=`).MatchString(df) {
		t.Error("the Dockerfile starts with a `# syntax=` line: BuildKit fetches that frontend from Docker Hub, so mirror-only builds fail")
	}
	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatalf("no .dockerignore: the build context carries .git, bin/ and data/ (%v)", err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(ignore), "\n") {
		lines[strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "/"), "/")] = true
	}
	for _, p := range []string{".git", "bin", "data", "**/.env"} {
		if !lines[p] {
			t.Errorf(".dockerignore does not leave out %s", p)
		}
	}
	for _, keep := range []string{"go.mod", "go.sum", "cmd", "contracts", "console", "deploy", "*.go", "**/*.go"} {
		if lines[keep] {
			t.Errorf(".dockerignore leaves out %s, which the build needs", keep)
		}
	}

	m, _ := loadK8s(t)
	sc := m.Deployment.Spec.Template.Spec.SecurityContext
	uid := regexp.MustCompile(`useradd [^\n]*--uid (\d+)`).FindStringSubmatch(df)
	gid := regexp.MustCompile(`groupadd [^\n]*--gid (\d+)`).FindStringSubmatch(df)
	user := regexp.MustCompile(`(?m)^USER (\S+)`).FindStringSubmatch(df)
	if uid == nil || gid == nil || user == nil {
		t.Fatalf("the Dockerfile makes no user with a fixed uid and gid (useradd --uid, groupadd --gid) or sets no USER")
	}
	if uid[1] != strconv.Itoa(sc.RunAsUser) || gid[1] != strconv.Itoa(sc.RunAsGroup) || gid[1] != strconv.Itoa(sc.FSGroup) || user[1] != uid[1]+":"+gid[1] {
		t.Errorf("the image runs as uid %s gid %s (USER %s); the Deployment as runAsUser %d, runAsGroup %d, fsGroup %d",
			uid[1], gid[1], user[1], sc.RunAsUser, sc.RunAsGroup, sc.FSGroup)
	}
	readme := readDoc(t, "../README.md")
	if !strings.Contains(readme, "podman build --format docker") {
		t.Error("README does not show the podman build (with --format docker, or the HEALTHCHECK is dropped)")
	}
}
