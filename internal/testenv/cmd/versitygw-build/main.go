// Command versitygw-build builds (or finds) the versitygw S3 gateway the tests use, at the pinned
// version, in the cache directory. scripts/test.sh runs it first so a cold build is its own visible step.
package main

import (
	"fmt"
	"log"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

func main() {
	bin, err := testenv.EnsureVersityGW(log.Printf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(bin)
}
