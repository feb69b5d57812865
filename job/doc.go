// Package job is the vocabulary of one media job that the pipeline and the jetstream package share:
// its kind and lane (kind.go; the kinds are a registry, registry.go, each declared in its own
// kind_<name>.go), how it ended and what its settlement publishes (outcome.go), the
// answer it gives (response.go), what an upload became for the next one of the same bytes (reuse.go)
// and how its errors are told (words.go). The pipeline runs a job and returns an Outcome; jetstream
// maps outcomes to acks and events. Neither imports the other for these words: job imports only
// contracts (internal/archtest holds both arrows).
package job
