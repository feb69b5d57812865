package s3_test

import (
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/storetest"
)

// The store's contract against versitygw, the maintained S3 server the tests and the deployment
// notes move to (docs/ingest.md says why): every promise objstore/storetest holds MinIO to.
func TestContract(t *testing.T) {
	g := testenv.StartVersityGW(t, testenv.VersityGWOptions{})
	storetest.Run(t, func(t *testing.T) objstore.Store { return newStore(t, gwConfig(g)) })
}
