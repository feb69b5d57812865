package faults

import (
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"go.uber.org/goleak"
)

// workerBin is the mediaworker binary TestMain built from this checkout.
var workerBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mw-faults-bin-")
	if err != nil {
		log.Printf("creating the build dir: %v", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if workerBin, err = testenv.BuildWorker(dir); err != nil {
		log.Print(err)
		return 1
	}
	// Built (or found in the cache) up front, so no test's time budget pays for it.
	if _, err = testenv.EnsureNATSServer(log.Printf); err != nil {
		log.Print(err)
		return 1
	}

	code := m.Run()
	if code != 0 {
		return code
	}
	// Every process watcher, connection, proxy and in-process server (single or clustered) a test
	// started must be gone by now; goleak retries while the last goroutines of a shut-down server
	// finish. Only the upstream leaks testenv documents are ignored.
	if err := goleak.Find(testenv.UpstreamLeaks()...); err != nil {
		fmt.Fprintf(os.Stderr, "goroutine leak after the fault suite: %v\n", err)
		return 1
	}
	return 0
}
