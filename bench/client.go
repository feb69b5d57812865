package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Client plays the API: it uploads into the JetStream object store, publishes optimize requests and
// receives the responses. It subscribes before it publishes, so no response can slip past.
type Client struct {
	Bucket string

	nc    *nats.Conn
	js    jetstream.JetStream
	api   *natsjs.Client // publishes requests and hears answers as the worker expects them
	store objstore.Store
	stop  func() // ends the listening

	mu      sync.Mutex
	waiting map[string]chan Answer
}

// Answer is a response and when it arrived.
type Answer struct {
	Resp contracts.Response
	At   time.Time
}

// Dial connects to the NATS at url, opens the object store of that NATS and creates bucket.
func Dial(ctx context.Context, url, bucket string) (*Client, error) {
	return DialWith(ctx, url, bucket, nil)
}

// DialWith is Dial with the uploads going to store (which the Client then owns) instead of the
// object store of the NATS at url; nil means that one.
func DialWith(ctx context.Context, url, bucket string, store objstore.Store) (*Client, error) {
	nc, js, err := natsjs.Connect(natsjs.ConnectConfig{URL: url, Name: "mwbench"})
	if err != nil {
		if store != nil {
			store.Close()
		}
		return nil, err
	}
	c := &Client{Bucket: bucket, nc: nc, js: js, api: natsjs.NewClient(js, natsjs.DefaultConfig()), store: store, waiting: map[string]chan Answer{}}
	if c.store == nil {
		if c.store, err = natsobj.New(c.js, natsobj.DefaultConfig()); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.store.EnsureBucket(ctx, bucket); err != nil {
		c.Close()
		return nil, fmt.Errorf("creating bucket: %w", err)
	}
	if c.stop, err = c.api.Listen(c.onAnswer, natsjs.AnswerResponse); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) onAnswer(a natsjs.Answer) {
	var r contracts.Response
	if err := json.Unmarshal(a.Data, &r); err != nil {
		return
	}
	c.mu.Lock()
	ch := c.waiting[r.MediaID]
	delete(c.waiting, r.MediaID)
	c.mu.Unlock()
	if ch != nil {
		ch <- Answer{Resp: r, At: a.At}
	}
}

// Close is idempotent.
func (c *Client) Close() {
	if c.store != nil {
		c.store.Close()
	}
	c.nc.Close()
}

// Upload stores the file at path under key.
func (c *Client) Upload(ctx context.Context, key, path string) error {
	_, err := objstore.UploadFile(ctx, c.store, c.Bucket, key, path, "application/octet-stream")
	return err
}

// Job is one published request.
type Job struct {
	ID        string
	Key       string
	Published time.Time
	answer    chan Answer
}

// Submit publishes a request for key with a new mediaId (also its Nats-Msg-Id).
func (c *Client) Submit(ctx context.Context, key string) (*Job, error) {
	j := &Job{ID: uuid.NewString(), Key: key, answer: make(chan Answer, 1)}
	req := contracts.Request{S3Key: key, S3Bucket: c.Bucket, MediaID: j.ID, MediaURL: "https://api.example/v1/media/" + j.ID}
	c.mu.Lock()
	c.waiting[j.ID] = j.answer
	c.mu.Unlock()
	j.Published = time.Now()
	if err := c.api.Submit(ctx, req); err != nil {
		c.mu.Lock()
		delete(c.waiting, j.ID)
		c.mu.Unlock()
		return nil, err
	}
	return j, nil
}

// Wait returns the job's response. A response that is not a success is an error.
func (c *Client) Wait(ctx context.Context, j *Job) (Answer, error) {
	select {
	case a := <-j.answer:
		if !a.Resp.Success {
			return a, fmt.Errorf("job for %s failed: %s", j.Key, a.Resp.Error)
		}
		return a, nil
	case <-ctx.Done():
		return Answer{}, fmt.Errorf("waiting for the response for %s: %w", j.Key, ctx.Err())
	}
}

// Result is one finished job of a batch.
type Result struct {
	Job     *Job
	Answer  Answer
	Latency time.Duration // publish → response
}

// RunBatch publishes one request per key, all at once, and waits for every response. wall runs from
// the first publish to the last response.
func (c *Client) RunBatch(ctx context.Context, keys []string) (results []Result, wall time.Duration, err error) {
	jobs := make([]*Job, 0, len(keys))
	for _, k := range keys {
		j, err := c.Submit(ctx, k)
		if err != nil {
			return nil, 0, err
		}
		jobs = append(jobs, j)
	}
	var errs []error
	var last time.Time
	for _, j := range jobs {
		a, err := c.Wait(ctx, j)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if a.At.After(last) {
			last = a.At
		}
		results = append(results, Result{Job: j, Answer: a, Latency: a.At.Sub(j.Published)})
	}
	if err := errors.Join(errs...); err != nil {
		return results, 0, err
	}
	return results, last.Sub(jobs[0].Published), nil
}

// Tap hears every message of the account on the client's own connection (jetstream.Tap): the NATS
// writes benchmark counts what a job makes the server store.
func (c *Client) Tap(fn func(natsjs.TapMsg)) (stop func(), err error) {
	return natsjs.Tap(c.nc, ">", fn)
}
