// Package jetstream owns everything NATS: the embedded server, the streams and the shared durable pull
// consumer, the pull loop that takes only as many messages as there are free slots, InProgress while a job
// is held, the mapping of job outcomes to Ack / Term / Nak, and publishing responses, virus events and
// dead letters. It calls the job pipeline through the small Processor interface declared here.
//
// Import it as natsjs: its name clashes with nats.go's jetstream package.
package jetstream
