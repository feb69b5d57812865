// Package jetstream owns everything NATS: the embedded server, the streams and the shared durable pull
// consumers (triage's and one per lane), the pull loops that take only as many messages as their lane
// has free slots, InProgress while a job is held, the mapping of job outcomes to Ack / Term / Nak, and publishing responses, virus events and
// dead letters; and the API's side of it (Client) for `submit`, the benchmarks and the console. It
// calls the job pipeline through the small Processor interface declared here.
//
// Import it as natsjs: its name clashes with nats.go's jetstream package.
package jetstream
