package objstore

import "context"

// Acting on the version of an object a Stat found: an infected upload is quarantined and removed as the
// bytes that were scanned, not as whatever the key holds by then. On a versioned S3 bucket a plain
// delete only hides the object under a delete marker (the infected bytes stay readable by version), and
// a copy made after an overwrite would quarantine the new upload while the scanned one stays.

// StattedRemover is implemented by stores that can copy and delete the version of an object their Stat
// described (Info.Sys).
type StattedRemover interface {
	// CopyStatted copies the version info describes (like Copy). If the object at info's key is no
	// longer that version and the store cannot read it any more, it fails with ErrChanged and copies
	// nothing.
	CopyStatted(ctx context.Context, info Info, dstBucket, dstKey string) error
	// DeleteStatted removes the version info describes (on a versioned bucket, that version itself).
	// If the object at the key is another version by now, it fails with ErrChanged and leaves it; if
	// the version is gone already, it does nothing.
	DeleteStatted(ctx context.Context, info Info) error
}

// CopyStatted copies the object info (from s's Stat) describes to dstBucket/dstKey: that version where
// s can tell versions apart (StattedRemover), else whatever the key holds (Copy).
func CopyStatted(ctx context.Context, s Store, info Info, dstBucket, dstKey string) error {
	if r, ok := s.(StattedRemover); ok && info.Sys != nil {
		return r.CopyStatted(ctx, info, dstBucket, dstKey)
	}
	return s.Copy(ctx, info.Bucket, info.Key, dstBucket, dstKey)
}

// DeleteStatted removes the object info (from s's Stat) describes: that version where s can tell
// versions apart (StattedRemover), else whatever the key holds (Delete).
func DeleteStatted(ctx context.Context, s Store, info Info) error {
	if r, ok := s.(StattedRemover); ok && info.Sys != nil {
		return r.DeleteStatted(ctx, info)
	}
	return s.Delete(ctx, info.Bucket, info.Key)
}
