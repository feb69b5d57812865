package objstore

import "context"

// Which bytes a key holds. A reader that remembers an object it wrote (the reuse memory remembers a
// job's outputs, to copy them for a later upload of the same bytes) must know, before it hands the
// object out again, that the key still holds those very bytes: another writer, or the worker itself
// answering another request under the same keys, may have replaced them with bytes of the same size.
// Info.Tag is the store's own name of the stored version (natsobj: the SHA-256 digest its metadata
// records and every read checks; s3: the ETag, with the version ID on a versioned bucket); a Put made
// under RecordingTag says the Tag of the version it stored, so the writer learns it without a Stat
// that could already see somebody else's upload.

type tagKey struct{}

// RecordingTag returns a context whose Put sets *tag to the Tag of the version it stored (left ""
// when the store cannot tell, or the Put failed). A context option like AsVariant: only the
// pipeline's output upload asks, and Stores that do not know tags (test fakes) need not change.
func RecordingTag(ctx context.Context, tag *string) context.Context {
	return context.WithValue(ctx, tagKey{}, tag)
}

// RecordTag is called by a backend's Put once the object is stored: it tells a caller that asked
// (RecordingTag) the stored version's Tag.
func RecordTag(ctx context.Context, tag string) {
	if p, ok := ctx.Value(tagKey{}).(*string); ok && p != nil {
		*p = tag
	}
}
