package webhooks

import "time"

// SetInProgressEvery shortens how often a delivery under way is marked in progress, for a test whose
// consumer has an ack wait of seconds; it returns the restore.
func SetInProgressEvery(d time.Duration) (restore func()) {
	old := inProgressEvery
	inProgressEvery = d
	return func() { inProgressEvery = old }
}
