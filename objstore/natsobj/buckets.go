package natsobj

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/objstore"
)

// Binding buckets: a bucket's object-store and stream handles are looked up once and kept, and a
// handle whose bucket was deleted behind the Store's back is dropped and bound afresh. The reading
// and writing sides of a Store share one buckets.

// buckets is the JetStream context, the configuration and the handles bound so far.
type buckets struct {
	js  jetstream.JetStream
	cfg Config

	mu     sync.Mutex
	bound  map[string]bound // binding costs two stream-info round trips, once per bucket
	closed bool
}

// info returns the object's current (not deleted) metadata.
func (s *buckets) info(ctx context.Context, bucket, key string) (*jetstream.ObjectInfo, error) {
	if err := checkKey(key, true); err != nil {
		return nil, err
	}
	var info *jetstream.ObjectInfo
	err := s.withHandle(ctx, bucket, true, func(h jetstream.ObjectStore) (err error) {
		info, err = h.GetInfo(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	if info.Opts != nil && info.Opts.Link != nil {
		// Links are never written by this package; following them would leave the bucket given.
		return nil, fmt.Errorf("%s is an object-store link, which is not supported", key)
	}
	return info, nil
}

// bound is a bucket's object-store handle and its stream's, for the direct gets Get makes itself.
type bound struct {
	obj    jetstream.ObjectStore
	stream jetstream.Stream
}

// withStream is withHandle for the bucket's stream.
func (s *buckets) withStream(ctx context.Context, bucket string, read bool, fn func(jetstream.Stream) error) error {
	for attempt := 0; ; attempt++ {
		b, cached, err := s.bind(ctx, bucket, read)
		if err != nil {
			return err
		}
		err = fn(b.stream)
		if cached && attempt == 0 && isNoResponders(err) {
			s.forget(bucket)
			continue
		}
		return s.mapErr(bucket, err)
	}
}

// withHandle runs fn on the bucket's handle and maps its error. A cached handle whose stream has
// gone (the bucket was deleted behind our back) answers "no responders" to direct gets and
// publishes; then the bucket is bound afresh, which says "not found" or works if it was re-created.
// fn must be safe to run twice after such an error.
func (s *buckets) withHandle(ctx context.Context, bucket string, read bool, fn func(jetstream.ObjectStore) error) error {
	for attempt := 0; ; attempt++ {
		h, cached, err := s.handle(ctx, bucket, read)
		if err != nil {
			return err
		}
		err = fn(h)
		if cached && attempt == 0 && isNoResponders(err) {
			s.forget(bucket)
			continue
		}
		return s.mapErr(bucket, err)
	}
}

func isNoResponders(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// handle returns the bound bucket, from the cache when possible. read says whether an invalid bucket
// name should also count as "not found".
func (s *buckets) handle(ctx context.Context, bucket string, read bool) (h jetstream.ObjectStore, cached bool, err error) {
	b, cached, err := s.bind(ctx, bucket, read)
	return b.obj, cached, err
}

// bind returns the bucket's handles, from the cache when possible.
func (s *buckets) bind(ctx context.Context, bucket string, read bool) (b bound, cached bool, err error) {
	if !validBucket.MatchString(bucket) {
		err := fmt.Errorf("%w: bucket %q: NATS object-store bucket names may contain only letters, digits, '-' and '_'",
			objstore.ErrInvalidName, bucket)
		if read {
			err = fmt.Errorf("%w (%w)", err, objstore.ErrNotFound)
		}
		return bound{}, false, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return bound{}, false, objstore.ErrClosed
	}
	b, ok := s.bound[bucket]
	s.mu.Unlock()
	if ok {
		return b, true, nil
	}

	// Bound outside the lock: a slow server must not serialise every bucket's callers. Each lookup is
	// bounded by Timeout whatever ctx allows: Put binds with its caller's context, a job's, whose
	// deadline may be half an hour away, and a lookup whose reply was lost as the server restarted
	// would hold the job that long.
	octx, cancel := s.opContext(ctx)
	defer cancel()
	if b.obj, err = s.js.ObjectStore(octx, bucket); err != nil {
		return bound{}, false, s.mapErr(bucket, err)
	}
	octx, cancel = s.opContext(ctx)
	defer cancel()
	if b.stream, err = s.js.Stream(octx, streamPrefix+bucket); err != nil {
		return bound{}, false, s.mapErr(bucket, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return bound{}, false, objstore.ErrClosed
	}
	s.bound[bucket] = b
	return b, false, nil
}

// mapErr turns the object store's "missing" errors into objstore.ErrNotFound and, when the bucket
// itself is gone (deleted behind our back), drops its cached handle.
func (s *buckets) mapErr(bucket string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		s.forget(bucket)
		return fmt.Errorf("%w: bucket %s does not exist", objstore.ErrNotFound, bucket)
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return objstore.ErrNotFound
	case isNoResponders(err):
		s.forget(bucket) // rebinding on the next call tells whether the bucket is gone
	}
	return err
}

func (s *buckets) forget(bucket string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bound, bucket)
}

func (s *buckets) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// opContext bounds a short call by Timeout, also when the caller's deadline is far away: a job may run
// for 30 minutes, but a reply lost in a cluster leader change must not hold it that long (the earlier
// deadline wins).
func (s *buckets) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// close forgets the bound buckets; later calls fail with objstore.ErrClosed.
func (s *buckets) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	clear(s.bound)
}
