package job

// Words tells a job's errors in their two voices. The pipeline knows its errors (pipeline.Words); the
// ack layer, which settles outcomes and gives requests up, is handed these words instead of reaching
// into the pipeline.
type Words interface {
	// Public is what a response may say about err: a sentence for the person who sent the upload,
	// never an endpoint, a scratch path or a library's own words.
	Public(err error) string
	// Detail is the private side of err, its whole chain and what a tool said, for the operator's
	// log line and the dead letter's Mw-Last-Error.
	Detail(err error) string
}
