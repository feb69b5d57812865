package testenv

import "go.uber.org/goleak"

// UpstreamLeaks are goroutines that libraries we use leak on their own; leak checks ignore them, and
// only them.
//
//   - nats.go v1.55.0, jetstream/publish.go: ObjectStore.Put creates a JetStream context whose first
//     async publish starts resetPendingAcksOnReconnect, which reads the status channel under a lock;
//     Put's deferred cleanupReplySub sets that channel to nil. When the Put ends before the goroutine
//     first runs (a tiny or failing upload), it reads nil and waits forever. One parked goroutine per
//     occurrence; nothing we call can prevent it short of not using ObjectStore.Put.
func UpstreamLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	}
}
