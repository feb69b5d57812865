// Command apiconsumer is a small example of the API side of mediaworker's contract (docs/contract.md). It
// reads the worker's responses and virus events from the responses stream with a durable JetStream
// consumer of its own, applies each one to a media record the way an API updates its database, and
// acknowledges the message only after that update.
//
//	go run ./examples/apiconsumer --nats-url nats://127.0.0.1:4222
//
// Each changed record is printed as one JSON line on stdout; events that change nothing are logged on
// stderr. The "database" is a map in memory: replace mediaStore with your repository.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	flag.StringVar(&url, "nats-url", url, "NATS server URL (default $NATS_URL or "+nats.DefaultURL+")")
	app := flag.String("app", "app", "the worker's --app subject prefix")
	stream := flag.String("stream", "", "stream holding the responses (default: the one capturing <app>.media.optimize.response,\n"+
		"e.g. APP_MEDIA_RESPONSES; at a hub that sources an edge site, e.g. EDGE_MEDIA_RESPONSES)")
	durable := flag.String("durable", "api", "durable consumer name: keep it stable, it is where the API's position is stored")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(os.Stderr, "apiconsumer: ", 0)
	if err := run(ctx, url, *app, *stream, *durable, newMediaStore(os.Stdout, logger), logger); err != nil {
		logger.Fatal(err)
	}
}

// run consumes until ctx ends.
func run(ctx context.Context, url, app, stream, durable string, db *mediaStore, logger *log.Logger) error {
	nc, err := nats.Connect(url, nats.Name("apiconsumer"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", url, err)
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	subj := contracts.SubjectsFor(app)
	if stream == "" {
		if stream, err = js.StreamNameBySubject(ctx, subj.Response); err != nil {
			return fmt.Errorf("finding the stream of %s (is the worker provisioned?): %w", subj.Response, err)
		}
	}

	// One durable consumer for both subjects, so a virus event and the failure response that follows it
	// arrive in the order the worker published them. It survives restarts: while the API is down,
	// messages wait in the stream and are delivered when it comes back. Under deploy/nats/accounts.conf
	// the API may not create consumers (a consumer's delivery subject is not permission-checked): an
	// operator creates the durable from deploy/nats/api-consumer.json, and the API binds to it. Without
	// such permissions (the embedded default), the API creates it itself.
	cons, err := js.Consumer(ctx, stream, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = createConsumer(ctx, js, stream, durable, subj)
	}
	if err != nil {
		return fmt.Errorf("binding to consumer %s on %s: %w", durable, stream, err)
	}

	// Consume calls the handler for one message at a time, in stream order.
	cc, err := cons.Consume(func(msg jetstream.Msg) { handle(msg, subj, db, logger) },
		jetstream.PullMaxMessages(16)) // a small buffer: messages waiting here count against AckWait
	if err != nil {
		return err
	}
	logger.Printf("consuming %s and %s from stream %s as %q", subj.Response, subj.Virus, stream, durable)
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// handle applies one message and settles it: Ack when applied (or when it can never apply), Nak with a
// delay when the database failed, so the message comes back.
func handle(msg jetstream.Msg, subj contracts.Subjects, db *mediaStore, logger *log.Logger) {
	var err error
	switch msg.Subject() {
	case subj.Virus:
		var ev contracts.VirusEvent
		if err = decode(msg.Data(), &ev); err == nil {
			err = db.applyVirus(ev)
		}
	default:
		var resp contracts.Response
		if err = decode(msg.Data(), &resp); err == nil {
			err = db.applyResponse(resp)
		}
	}
	var bad badEvent
	switch {
	case err == nil:
		_ = msg.Ack()
	case errors.As(err, &bad):
		// Redelivering cannot fix it: stop delivery (the message stays in the stream for inspection).
		logger.Printf("ignoring %s: %v", msg.Subject(), err)
		_ = msg.TermWithReason(err.Error())
	default:
		logger.Printf("database error, retrying in 5s: %v", err)
		_ = msg.NakWithDelay(5 * time.Second)
	}
}

// badEvent is an event that can never be applied.
type badEvent struct{ error }

// decode accepts what the schemas accept and ignores unknown fields (the worker may add optional ones).
func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return badEvent{fmt.Errorf("decoding: %w", err)}
	}
	return nil
}

// Media is the API's record of one upload, as a database row would hold it.
type Media struct {
	MediaID string `json:"mediaId"`
	Status  string `json:"status"`         // pending, ready, failed or infected
	Kind    string `json:"kind,omitempty"` // image or video, from the variants
	// Images.
	HighURL   string `json:"highUrl,omitempty"`
	MediumURL string `json:"mediumUrl,omitempty"`
	LowURL    string `json:"lowUrl,omitempty"`
	// Videos.
	VideoURL     string `json:"videoUrl,omitempty"`
	ThumbnailURL string `json:"thumbnailUrl,omitempty"`
	HLSURL       string `json:"hlsUrl,omitempty"`
	// Failures.
	Error     string `json:"error,omitempty"`
	VirusName string `json:"virusName,omitempty"`
}

// Statuses. A record only moves forward: a success is never replaced by a later failure (a duplicate or a
// replay may come after it), and an infected upload stays infected.
const (
	StatusPending  = "pending"
	StatusReady    = "ready"
	StatusFailed   = "failed"
	StatusInfected = "infected"
)

// mediaStore stands in for the API's database.
type mediaStore struct {
	mu   sync.Mutex
	rows map[string]*Media
	out  io.Writer
	log  *log.Logger
}

func newMediaStore(out io.Writer, logger *log.Logger) *mediaStore {
	return &mediaStore{rows: map[string]*Media{}, out: out, log: logger}
}

// row returns the record of mediaID. A real API created it (status pending) when it published the
// request, and acknowledges and drops events for ids it does not know; the example creates it.
func (s *mediaStore) row(mediaID string) *Media {
	m, ok := s.rows[mediaID]
	if !ok {
		m = &Media{MediaID: mediaID, Status: StatusPending}
		s.rows[mediaID] = m
	}
	return m
}

// applyResponse maps a response onto the record (the mapping of docs/contract.md).
func (s *mediaStore) applyResponse(r contracts.Response) error {
	if r.MediaID == "" {
		return badEvent{errors.New("response without mediaId")}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.row(r.MediaID)
	switch {
	case m.Status == StatusInfected:
		s.log.Printf("%s: %s response after a virus event: kept infected", r.MediaID, outcome(r))
		return nil
	case !r.Success && m.Status == StatusReady:
		s.log.Printf("%s: failure after success (a duplicate or replay): kept ready: %s", r.MediaID, r.Error)
		return nil
	case !r.Success:
		next := *m
		next.Status, next.Error = StatusFailed, r.Error
		return s.save(m, next)
	}

	next := Media{MediaID: m.MediaID, Status: StatusReady}
	for _, v := range r.Processed {
		switch {
		case v.Format == contracts.FormatWebP && v.Quality == contracts.QualityHigh:
			next.Kind, next.HighURL = "image", v.URL
		case v.Format == contracts.FormatWebP && v.Quality == contracts.QualityMedium:
			next.Kind, next.MediumURL = "image", v.URL
		case v.Format == contracts.FormatWebP && v.Quality == contracts.QualityLow:
			next.Kind, next.LowURL = "image", v.URL
		case v.Format == contracts.FormatMP4:
			next.Kind, next.VideoURL = "video", v.URL
		case v.Format == contracts.FormatJPG && v.Quality == contracts.QualityThumbnail:
			next.ThumbnailURL = v.URL
		case v.Format == contracts.FormatM3U8:
			next.HLSURL = v.URL
		default:
			// A variant this API does not know yet (the enums may grow): keep going without it.
		}
	}
	return s.save(m, next)
}

// applyVirus marks the upload infected. The worker has already deleted (or quarantined) the upload and
// made no variants; the API removes what it still references and blocks the media.
func (s *mediaStore) applyVirus(ev contracts.VirusEvent) error {
	if ev.MediaID == "" {
		return badEvent{errors.New("virus event without mediaId")}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.row(ev.MediaID)
	next := Media{MediaID: m.MediaID, Status: StatusInfected, VirusName: ev.VirusName,
		Error: fmt.Sprintf("virus detected: %s (%s)", ev.VirusName, ev.ActionTaken)}
	return s.save(m, next)
}

// save writes the record if it changed and prints it. Applying the same event twice changes nothing.
func (s *mediaStore) save(m *Media, next Media) error {
	if *m == next {
		return nil
	}
	*m = next
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.out, "%s\n", line)
	return err
}

func outcome(r contracts.Response) string {
	if r.Success {
		return "success"
	}
	return "failure"
}

// createConsumer creates the API's durable, as deploy/nats/api-consumer.json describes it.
func createConsumer(ctx context.Context, js jetstream.JetStream, stream, durable string, subj contracts.Subjects) (jetstream.Consumer, error) {
	return js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:        durable,
		Description:    "the API's view of mediaworker responses",
		FilterSubjects: []string{subj.Response, subj.Virus},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
	})
}
