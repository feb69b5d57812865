package confine_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/mediaworker/mediaworker/internal/confine"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The test binary plays the confined program: "confine" confines itself and re-executes as "probe",
// which tries what a hostile document would make a loader try and prints what happened.

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "confine":
			os.Exit(confineAndProbe(os.Args[2:]))
		case "confine-without-landlock":
			if err := testenv.WithoutLandlock(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(confineAndProbe(os.Args[2:]))
		case "probe":
			os.Exit(probe(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

// confineAndProbe confines its thread to args[0] (read-write) and the system, then execs "probe".
func confineAndProbe(args []string) int {
	exes, err := confine.Executables()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	runtime.LockOSThread()
	rep, err := confine.Restrict(confine.Paths{ReadWrite: args[:1], ReadOnly: confine.SystemReadOnly(), Exec: exes})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = syscall.Exec(exes[0], append([]string{exes[0], "probe", rep.String()}, args...), []string{"PATH=/usr/bin:/bin"})
	fmt.Fprintln(os.Stderr, err)
	return 1
}

type probeResult struct {
	Confinement  string
	ReadScratch  string // "" when it worked, else the error
	WriteScratch string
	ReadOutside  string
	ReadEtc      string
	ReadProc     string
	ConnectTCP   string
	UDPSocket    string
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// probe: args are the confinement, the scratch directory, a file outside it, and a loopback address.
func probe(args []string) int {
	r := probeResult{Confinement: args[0]}
	scratch, outside, addr := args[1], args[2], args[3]
	_, err := os.ReadFile(filepath.Join(scratch, "input"))
	r.ReadScratch = errText(err)
	r.WriteScratch = errText(os.WriteFile(filepath.Join(scratch, "out"), []byte("ok"), 0o600))
	_, err = os.ReadFile(outside)
	r.ReadOutside = errText(err)
	_, err = os.ReadFile("/etc/passwd")
	r.ReadEtc = errText(err)
	_, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", os.Getppid()))
	r.ReadProc = errText(err)
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
	}
	r.ConnectTCP = errText(err)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err == nil {
		syscall.Close(fd)
	}
	r.UDPSocket = errText(err)
	json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

func TestRestrictShutsOutFilesAndNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	scratch := t.TempDir()
	if err := os.WriteFile(filepath.Join(scratch, "input"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runProbe(t, "confine", scratch, outside, ln.Addr().String())
	// This project's machines (kernel 6.x) have Landlock with its network part and seccomp; a kernel
	// without them would be a finding, not something to skip over.
	if !strings.HasPrefix(r.Confinement, "landlock/") || !strings.HasSuffix(r.Confinement, "seccomp-no-sockets") {
		t.Errorf("confinement = %q, want Landlock and seccomp", r.Confinement)
	}
	if r.ReadScratch != "" || r.WriteScratch != "" {
		t.Errorf("the scratch directory is not usable: read %q, write %q", r.ReadScratch, r.WriteScratch)
	}
	for what, got := range map[string]string{"a file outside scratch": r.ReadOutside, "/etc/passwd": r.ReadEtc,
		"the parent's environment": r.ReadProc, "a loopback TCP connection": r.ConnectTCP, "a UDP socket": r.UDPSocket} {
		if got == "" {
			t.Errorf("the confined probe could reach %s", what)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections reached the listener, want 0", n)
	}
}

// runProbe runs this test binary as mode with args and returns the probe's answer.
func runProbe(t *testing.T, mode string, args ...string) probeResult {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, append([]string{mode}, args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the confined probe failed: %v\n%s", err, stderr)
	}
	var r probeResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("reading the probe's answer %q: %v", out, err)
	}
	t.Logf("%+v", r)
	return r
}

// TestRestrictWithoutLandlockKeepsTheRest: on a kernel without Landlock (simulated: its system calls
// answer ENOSYS) Restrict still succeeds, reports the layer missing, and the seccomp layer still
// refuses sockets.
func TestRestrictWithoutLandlockKeepsTheRest(t *testing.T) {
	scratch := t.TempDir()
	if err := os.WriteFile(filepath.Join(scratch, "input"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runProbe(t, "confine-without-landlock", scratch, filepath.Join(scratch, "input"), "127.0.0.1:9")
	if r.Confinement != "seccomp-no-sockets" {
		t.Errorf("confinement = %q, want seccomp-no-sockets alone", r.Confinement)
	}
	if r.ReadScratch != "" || r.WriteScratch != "" {
		t.Errorf("the scratch directory is not usable: read %q, write %q", r.ReadScratch, r.WriteScratch)
	}
	if r.ConnectTCP == "" || r.UDPSocket == "" {
		t.Errorf("sockets were allowed without Landlock: tcp %q, udp %q", r.ConnectTCP, r.UDPSocket)
	}
}
