package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Ports for the servers the tests start as processes of their own (clamd, versitygw, nats-server), and
// for addresses a test must know before the server that binds them starts. A port found free by
// listening on :0 and closing again was not enough: the kernel handed the same port out twice (CI: a
// worker's HTTP address and versitygw's, in one test), and any test process listening on :0 can take
// it before the server binds it. So these ports come from below the kernel's ephemeral range, which
// listening on :0 and outgoing connections never use, and each is claimed with a lock file for the
// life of the test process, so that neither this process nor another test process on the machine is
// handed it again.
var portLow, portHigh = claimRange()

// claimRange is the 12000 ports just below the kernel's ephemeral range (which starts at 32768 by
// default), or 20000-32000 when the range cannot be read or starts too low to leave room below it;
// the claims then still keep the tests from sharing a port among themselves.
func claimRange() (low, high int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		if ephemeral, err := strconv.Atoi(f[0]); err == nil && ephemeral-12000 >= 1024 {
			return ephemeral - 12000, ephemeral
		}
	}
	return 20000, 32000
}

var ports struct {
	sync.Mutex
	next  int
	locks []*os.File // held open: a flock lasts as long as its file stays open
}

// portClaims is where the claims are, taken as the process starts: an in-process App points TMPDIR at
// its scratch dir while it runs, and claims made there would not be seen by other processes.
var portClaims = filepath.Join(os.TempDir(), "mediaworker-test-ports")

// FreeAddr returns a loopback host:port that no other caller of FreeAddr on this machine has, and that
// was free when it was claimed.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := claimAddr()
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	return addr
}

func claimAddr() (string, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.next == 0 {
		ports.next = portLow + rand.IntN(portHigh-portLow)
	}
	if err := os.MkdirAll(portClaims, 0o777); err != nil {
		return "", fmt.Errorf("creating the port claims' directory: %w", err)
	}
	_ = os.Chmod(portClaims, 0o1777) // any user's test runs claim here; umask would keep them out
	for range portHigh - portLow {
		port := ports.next
		if ports.next++; ports.next == portHigh {
			ports.next = portLow
		}
		lock, ok := claimPort(portClaims, port)
		if !ok {
			continue // claimed by this or another test process
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			ports.locks = append(ports.locks, lock) // in use by something else: not tried again
			continue
		}
		_ = l.Close()
		ports.locks = append(ports.locks, lock)
		return addr, nil
	}
	return "", fmt.Errorf("every loopback port in %d-%d is claimed or in use", portLow, portHigh)
}

// claimPort takes the lock file of port, without waiting.
func claimPort(dir string, port int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	_ = f.Chmod(0o666)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return f, true
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// TailLines returns the last n lines of a log, with "..." in front when it cut some.
func TailLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
