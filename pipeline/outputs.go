package pipeline

// The job's outputs: what the transform made of the input (an image's variants, a video's MP4, poster
// and recipe outputs: the kinds' handlers), each a file to upload with the variant it becomes, and
// their upload into the store, which lists them for the answer (response.go).

import (
	"context"
	"fmt"
	"os"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
)

// output is one file to upload and the variant it becomes.
type output struct {
	path, key, contentType string
	variant                contracts.Variant
	role, name             string // what the output is (reuse.go's roles), to make its key for another request
	size                   int64  // once uploaded
	tag                    string // once uploaded: the store's name of the stored version (objstore.Info.Tag)
}

// upload stores every output and lists its variant for the answer (respond). Only outputs with a
// variant format are listed.
func (p *Pipeline) upload(ctx context.Context, j *job) error {
	for i, o := range j.outs {
		if err := ctx.Err(); err != nil {
			return transientSaid("uploading", jobStopped, fmt.Errorf("job stopped: %w", context.Cause(ctx)))
		}
		n, tag, err := p.out.uploadFile(ctx, j.req.S3Bucket, o)
		j.outs[i].size, j.outs[i].tag = n, tag
		if err != nil {
			err = fmt.Errorf("uploading %s: %w", o.key, err)
			if objstore.IsPermanent(err) { // the store refuses the output (its bucket gone, a name it will not take)
				return storeRefused("uploading", err)
			}
			return transient("uploading", err)
		}
		if p.observer != nil {
			p.observer.Transferred("out", n)
		}
		if o.variant.Format == "" {
			continue
		}
		v := o.variant
		v.Size = n
		v.URL = p.out.url(j.req.S3Bucket, o.key)
		j.made.processed = append(j.made.processed, v)
	}
	return nil
}

// uploadFile stores one output and returns its size and the Tag of the version stored (what the
// reuse memory checks before it hands the output out again; "" when the store cannot tell).
func (s *storer) uploadFile(ctx context.Context, bucket string, o output) (int64, string, error) {
	f, err := os.Open(o.path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	// Marked as ours: the HTTP server serves only objects that carry the marker.
	var tag string
	if err := s.store.Put(objstore.RecordingTag(objstore.AsVariant(ctx), &tag), bucket, o.key, f, st.Size(), o.contentType); err != nil {
		return 0, "", err
	}
	return st.Size(), tag, nil
}

func (s *storer) url(bucket, key string) string {
	u := s.store.URL(bucket, key)
	if s.cfg.PublicBaseURL != "" {
		u = objstore.ObjectURL(s.cfg.PublicBaseURL, key)
	}
	if s.signURL != nil {
		u = s.signURL(u, key)
	}
	return u
}
