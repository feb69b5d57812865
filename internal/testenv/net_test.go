package testenv

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// FreeAddr hands a port out once per machine: neither this process nor another test process gets an
// address again, and none is in the range listening on :0 draws from.
func TestFreeAddrHandsAPortOutOnce(t *testing.T) {
	if os.Getenv("TESTENV_CLAIM_PORTS") != "" {
		n, _ := strconv.Atoi(os.Getenv("TESTENV_CLAIM_PORTS"))
		for range n {
			os.Stdout.WriteString(FreeAddr(t) + "\n")
		}
		// Hold the claims until the parent has made its own.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		return
	}
	const each = 300
	child := exec.Command(os.Args[0], "-test.run", "^TestFreeAddrHandsAPortOutOnce$")
	child.Env = append(os.Environ(), "TESTENV_CLAIM_PORTS="+strconv.Itoa(each))
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for i := 0; i < each && sc.Scan(); i++ {
		seen[sc.Text()] = "the other process"
	}
	if len(seen) != each {
		t.Fatalf("the other process got %d distinct addresses of %d", len(seen), each)
	}
	for range each {
		addr := FreeAddr(t)
		if who, ok := seen[addr]; ok {
			t.Fatalf("%s handed out twice: to %s and to this one", addr, who)
		}
		seen[addr] = "this process"
		_, port, _ := net.SplitHostPort(addr)
		if p, _ := strconv.Atoi(port); p < portLow || p >= portHigh || !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("%s: want a loopback port in %d-%d", addr, portLow, portHigh)
		}
	}
	_, _ = stdin.Write([]byte("\n"))
	if err := child.Wait(); err != nil {
		t.Fatalf("the other process: %v", err)
	}
}
