package s3_test

import (
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/s3"
	"github.com/mediaworker/mediaworker/objstore/storetest"
)

// The store's contract against versitygw, the maintained S3 server the tests and the deployment
// notes move to (docs/ingest.md says why): every promise objstore/storetest holds MinIO to.
func TestContractVersityGW(t *testing.T) {
	g := testenv.StartVersityGW(t, testenv.VersityGWOptions{})
	storetest.Run(t, func(t *testing.T) objstore.Store {
		cfg := s3.DefaultConfig()
		cfg.Endpoint, cfg.AccessKey, cfg.SecretKey = g.Endpoint, g.AccessKey, g.SecretKey
		return newStore(t, cfg)
	})
}
