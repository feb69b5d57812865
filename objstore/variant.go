package objstore

import "context"

// VariantHeader is the metadata entry the worker sets on every output it uploads: a header of the
// object in the NATS object store, x-amz-meta-mediaworker-variant on S3. The HTTP server serves only
// objects that carry it, so an original upload, a quarantined file or anything another writer put
// under a variant-looking key is never served from the worker's origin. Uploads (`submit`, the API)
// and copies (quarantine) never set it.
const VariantHeader = "Mediaworker-Variant"

type variantKey struct{}

// AsVariant returns a context whose Put marks the stored object as a variant this worker wrote. A
// context option rather than a Put parameter: only the pipeline's output upload sets it, and every
// other Put (and every Store fake in tests) stays as it is.
func AsVariant(ctx context.Context) context.Context {
	return context.WithValue(ctx, variantKey{}, true)
}

// PutsVariant reports whether a Put under ctx must mark the object as a variant (see AsVariant).
func PutsVariant(ctx context.Context) bool {
	v, _ := ctx.Value(variantKey{}).(bool)
	return v
}
