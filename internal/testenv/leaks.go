package testenv

import "go.uber.org/goleak"

// UpstreamLeaks are goroutines that libraries we use leak on their own; leak checks ignore them, and
// only them.
//
// There are none now. The one there was — nats.go v1.55.0's jetstream ObjectStore.Put parking a
// resetPendingAcksOnReconnect goroutine per small or failing upload — is gone because objstore/natsobj
// writes objects itself (see its put.go). The slice keeps one inert option (it matches no goroutine)
// only because jetstream/worker_test.go indexes it; once that index is gone, return nil.
func UpstreamLeaks() []goleak.Option {
	return []goleak.Option{goleak.IgnoreTopFunction("no upstream leak is ignored")}
}
