package deps
import (
 _ "github.com/nats-io/nats.go/jetstream"
 _ "github.com/nats-io/nats-server/v2/server"
 _ "github.com/minio/minio-go/v7"
 _ "github.com/gabriel-vasile/mimetype"
 _ "github.com/rs/zerolog"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/santhosh-tekuri/jsonschema/v6"
 _ "go.uber.org/goleak"
 _ "github.com/google/uuid"
 _ "github.com/dutchcoders/go-clamd"
)
