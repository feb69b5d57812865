package testenv

import (
	"strings"
	"testing"
)

func TestGoroutinesOfKeepsTheLogAndOurGoroutines(t *testing.T) {
	log := `{"level":"info","message":"mediaworker ready"}
{"level":"warn","message":"disconnected from nats"}
SIGQUIT: quit
PC=0x47f0a1 m=0 sigcode=0

goroutine 0 gp=0x1 m=0 mp=0x2 [idle]:
runtime.futex(0x1)
	/usr/local/go/src/runtime/sys_linux_amd64.s:557 +0x21 fp=0x7ffc sp=0x7ffd pc=0x47f0a1

goroutine 41 gp=0x2 m=nil [select, 2 minutes]:
github.com/nats-io/nats.go/jetstream.(*pullSubscription).pullMessages(0x1)
	/root/go/pkg/mod/github.com/nats-io/nats.go@v1.55.0/jetstream/pull.go:1098 +0xa5 fp=0x1 sp=0x2 pc=0x3

goroutine 97 gp=0x3 m=nil [chan receive, 2 minutes]:
github.com/mediaworker/mediaworker/pipeline.(*fetcher).verdict(0x1)
	/src/pipeline/download.go:183 +0x85 fp=0x1 sp=0x2 pc=0x3
created by github.com/mediaworker/mediaworker/jetstream.(*Worker).pull in goroutine 40
	/src/jetstream/worker.go:279 +0x2c5 fp=0x1 sp=0x2 pc=0x3
`
	before, gs := GoroutinesOf([]byte(log), 10, "github.com/mediaworker/mediaworker/")
	if !strings.Contains(before, "disconnected from nats") || strings.Contains(before, "SIGQUIT") {
		t.Errorf("log before the dump:\n%s", before)
	}
	if !strings.Contains(gs, "goroutine 97 ") || !strings.Contains(gs, "download.go:183 +0x85\n") {
		t.Errorf("our goroutine missing or still noisy:\n%s", gs)
	}
	if strings.Contains(gs, "goroutine 41 ") || strings.Contains(gs, "goroutine 0 ") || strings.Contains(gs, "fp=") {
		t.Errorf("kept goroutines that run none of our code, or register noise:\n%s", gs)
	}
	if before, gs := GoroutinesOf([]byte("a\nb\n"), 1); before != "...\nb" || gs != "" {
		t.Errorf("a log without a dump: %q, %q", before, gs)
	}
}
