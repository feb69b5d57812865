package app

import (
	"maps"
	"sync"
	"time"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/membudget"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is the Prometheus view of the worker; it observes both the pipeline and the pull loop.
type metrics struct {
	reg            *prometheus.Registry
	jobs           *prometheus.CounterVec
	stages         *prometheus.HistogramVec
	redeliveries   prometheus.Counter
	publishFailure *prometheus.CounterVec
	verdicts       *prometheus.CounterVec
	bytes          *prometheus.CounterVec

	// The rescues counted in jobs (outcome "rescued") again, by lane ("" is triage), with the last
	// one's time and action, for the console.
	rescueMu sync.Mutex
	rescued  map[pipeline.MediaKind]rescueStat
}

// rescueStat is one lane's rescues on this instance since it started.
type rescueStat struct {
	count  int
	last   time.Time // when the last one was settled
	action string    // what was done with the last one: retried, gave_up, removed or finished
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg:     reg,
		rescued: map[pipeline.MediaKind]rescueStat{},
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mediaworker_jobs_total",
			Help: "Settled deliveries by media kind and outcome (success, failed, infected, retry, dead_lettered, invalid, handed_back, routed, duplicate), and stranded messages rescued (rescued: kind is the lane, unknown for triage).",
		}, []string{"kind", "outcome"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mediaworker_stage_duration_seconds",
			Help:    "Time spent in each job stage.",
			Buckets: []float64{.005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 180, 600},
		}, []string{"kind", "stage"}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mediaworker_redeliveries_total",
			Help: "Deliveries that were not the first of their message.",
		}),
		publishFailure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mediaworker_publish_failures_total",
			Help: "Publishes to JetStream that got no ack.",
		}, []string{"subject"}),
	}
	m.verdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mediaworker_scan_verdicts_total",
		Help: "clamd verdicts: clean, infected, refused (over a clamd limit) or error.",
	}, []string{"verdict"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mediaworker_bytes_total",
		Help: "Bytes downloaded (in) and uploaded (out).",
	}, []string{"direction"})
	reg.MustRegister(m.jobs, m.stages, m.redeliveries, m.publishFailure, m.verdicts, m.bytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchSignatures exports the age of clamd's signature database (NaN while unknown or for a dev
// database), so a site without freshclam is noticed before a real virus is.
func (m *metrics) watchSignatures(age func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mediaworker_clamd_signature_age_seconds",
		Help: "Age of clamd's official signature database; NaN when clamd does not answer or has only a dev database.",
	}, age))
}

// watchLanes shows the worker's slot pools, triage and each lane it serves: a pull is a slot, so a
// lane whose slots are all busy is a lane that pulls nothing.
func (m *metrics) watchLanes(lanes []natsjs.LaneSlots) {
	for _, l := range lanes {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "mediaworker_jobs_in_flight",
			Help:        "Messages this instance is handling, by lane (triage, image, video).",
			ConstLabels: prometheus.Labels{"lane": l.Name},
		}, func() float64 { return float64(l.Busy()) }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "mediaworker_lane_slots",
			Help:        "Slots of this instance, by lane it serves (triage, image, video).",
			ConstLabels: prometheus.Labels{"lane": l.Name},
		}, func() float64 { return float64(l.Size) }))
	}
}

// watchMemory shows a lane's memory budget: its size, the bytes admitted now and at most so far, and
// the jobs waiting for memory (a lane with free slots whose jobs wait here is bounded by bytes, not
// count). Each lane has its own budget, told apart by the lane label.
func (m *metrics) watchMemory(lane string, b *membudget.Budget) {
	labels := prometheus.Labels{"lane": lane}
	for _, g := range []struct {
		name, help string
		read       func(membudget.Stats) float64
	}{
		{"mediaworker_memory_budget_bytes", "The lane's memory budget (--max-memory), bytes.", func(s membudget.Stats) float64 { return float64(s.Size) }},
		{"mediaworker_memory_admitted_bytes", "Expected peak memory of the lane's transforms admitted now, bytes.", func(s membudget.Stats) float64 { return float64(s.InUse) }},
		{"mediaworker_memory_budget_peak_bytes", "The most bytes the lane admitted at once since the start.", func(s membudget.Stats) float64 { return float64(s.Peak) }},
		{"mediaworker_memory_waiting_jobs", "The lane's jobs waiting for memory to start their transform.", func(s membudget.Stats) float64 { return float64(s.Waiting) }},
	} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help, ConstLabels: labels},
			func() float64 { return g.read(b.Stats()) }))
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "mediaworker_memory_waited_jobs_total",
		Help:        "The lane's jobs that had to wait for memory before their transform.",
		ConstLabels: labels,
	}, func() float64 { return float64(b.Stats().Waited) }))
}

// watchIngest shows what became of the upload events ingest read (--ingest).
func (m *metrics) watchIngest(counts func() map[string]int64) {
	for _, outcome := range []string{"published", "duplicate", "ignored", "unwatched", "guarded", "malformed"} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "mediaworker_ingest_events_total",
			Help:        "Upload event records ingest read, by what became of them.",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, func() float64 { return float64(counts()[outcome]) }))
	}
}

func kindLabel(k pipeline.MediaKind) string {
	if k == "" {
		return "unknown"
	}
	return string(k)
}

// StageDone implements pipeline.Observer.
func (m *metrics) StageDone(kind pipeline.MediaKind, stage string, d time.Duration, err error) {
	m.stages.WithLabelValues(kindLabel(kind), stage).Observe(d.Seconds())
}

// Scanned implements pipeline.Observer.
func (m *metrics) Scanned(verdict string) { m.scanned(verdict) }

func (m *metrics) scanned(verdict string) { m.verdicts.WithLabelValues(verdict).Inc() }

// Transferred implements pipeline.Observer.
func (m *metrics) Transferred(direction string, n int64) {
	m.bytes.WithLabelValues(direction).Add(float64(n))
}

// Settled implements jetstream.Observer.
func (m *metrics) Settled(outcome string, kind pipeline.MediaKind, deliveries uint64) {
	m.jobs.WithLabelValues(kindLabel(kind), outcome).Inc()
	if deliveries > 1 {
		m.redeliveries.Inc()
	}
}

// Rescued implements jetstream.Observer: a stranded message (one no consumer would deliver again) the
// worker settled, counted by lane as outcome "rescued"; the log line says what was done with it.
func (m *metrics) Rescued(lane pipeline.MediaKind, action string) {
	m.jobs.WithLabelValues(kindLabel(lane), "rescued").Inc()
	m.rescueMu.Lock()
	defer m.rescueMu.Unlock()
	r := m.rescued[lane]
	m.rescued[lane] = rescueStat{count: r.count + 1, last: time.Now(), action: action}
}

// rescues returns each lane's rescues so far ("" is triage); lanes without any are absent.
func (m *metrics) rescues() map[pipeline.MediaKind]rescueStat {
	m.rescueMu.Lock()
	defer m.rescueMu.Unlock()
	return maps.Clone(m.rescued)
}

// Published implements jetstream.Observer.
func (m *metrics) Published(subject string, d time.Duration) {
	m.stages.WithLabelValues("any", "publishing").Observe(d.Seconds())
}

// PublishFailed implements jetstream.Observer.
func (m *metrics) PublishFailed(subject string) {
	m.publishFailure.WithLabelValues(subject).Inc()
}

// newWebhookDeliveries counts webhook attempts; app/webhooks.go registers it when endpoints are
// configured.
func newWebhookDeliveries() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mediaworker_webhook_deliveries_total",
		Help: "Webhook delivery attempts by endpoint and result (delivered, retry, dead_lettered, disabled, skipped, dropped).",
	}, []string{"endpoint", "result"})
}
