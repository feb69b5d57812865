package objstore

import (
	"context"
	"fmt"
	"io"
	"os"
)

// TooLargeError is returned (wrapped) by DownloadFile when an object is over the caller's limit. It is
// permanent: the object will not shrink by itself.
type TooLargeError struct {
	Size  int64
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("object is %s, limit is %s", FormatBytes(e.Size), FormatBytes(e.Limit))
}

// FormatBytes renders a byte count for people: "512 bytes", "1.5 KB", "120.0 MB" (decimal units, as
// limits are usually given).
func FormatBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "KMGTP"[exp])
}

// DownloadFile streams bucket/key into a new file at path (mode 0600; the file must not exist, so a
// scratch path is never silently reused) and returns the object's Info.
//
// An object larger than maxBytes (maxBytes <= 0: no cap) is refused before anything is fetched, and
// the stream is cut off as soon as the store sends more than Stat announced: a broken store or a
// concurrent overwrite cannot push more than the cap to disk (that error is transient; a retry sees
// the new size). The file holds exactly Info.Size bytes on success;
// on any error it is removed.
func DownloadFile(ctx context.Context, s Store, bucket, key, path string, maxBytes int64) (Info, error) {
	info, err := s.Stat(ctx, bucket, key)
	if err != nil {
		return Info{}, fmt.Errorf("downloading: %w", err)
	}
	return DownloadStatted(ctx, s, info, path, maxBytes, nil)
}

// DownloadStatted is DownloadFile for an object the caller has just looked up (info from Stat: the job
// looks its object up once) that also streams every byte written to the file into the writer that tee
// returns, once the object's size is accepted (a scanner reading while the download runs, say). tee
// may be nil or return nil; a failed write to the tee fails the download. The size Stat announced is
// enforced against what arrives.
func DownloadStatted(ctx context.Context, s Store, info Info, path string, maxBytes int64, tee func(Info) io.Writer) (Info, error) {
	bucket, key := info.Bucket, info.Key
	if _, ok := s.(StattedGetter); !ok || info.Sys == nil {
		// GetStatted will look the object up again and may read a newer version than the one whose
		// digest Stat reported: that digest vouches for nothing then.
		info.SHA256 = nil
	}
	if maxBytes > 0 && info.Size > maxBytes {
		return info, fmt.Errorf("downloading %s/%s: %w", bucket, key, &TooLargeError{Size: info.Size, Limit: maxBytes})
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Info{}, fmt.Errorf("downloading %s/%s: creating file: %w", bucket, key, err)
	}
	var w io.Writer = f
	if tee != nil {
		if t := tee(info); t != nil {
			w = io.MultiWriter(f, t)
		}
	}
	cw := &capWriter{w: w, announced: info.Size}
	n, err := GetStatted(ctx, s, info, cw) // the version Stat saw, without looking it up again where the store can
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing file: %w", cerr)
	}
	if err == nil && n != info.Size {
		err = fmt.Errorf("store sent %d of the %d bytes it announced", n, info.Size)
	}
	if err != nil {
		_ = os.Remove(path)
		return Info{}, fmt.Errorf("downloading %s/%s: %w", bucket, key, err)
	}
	return info, nil
}

// UploadFile uploads the regular file at path with its exact size and returns that size.
func UploadFile(ctx context.Context, s Store, bucket, key, path, contentType string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("uploading %s/%s: %w", bucket, key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("uploading %s/%s: %w", bucket, key, err)
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("uploading %s/%s: %s is not a regular file", bucket, key, path)
	}
	if err := s.Put(ctx, bucket, key, f, st.Size(), contentType); err != nil {
		return 0, fmt.Errorf("uploading: %w", err)
	}
	return st.Size(), nil
}

// capWriter passes at most announced bytes to w and fails the write that would go past them. As
// announced <= the caller's cap, the size seen by Stat is a hard limit on what reaches the disk; a
// retry then sees the new size in Stat (and a TooLargeError if it is over the cap).
type capWriter struct {
	w         io.Writer
	announced int64
	written   int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	room := c.announced - c.written
	if int64(len(p)) > room {
		n, err := c.w.Write(p[:room])
		c.written += int64(n)
		if err == nil {
			err = fmt.Errorf("store sent more bytes than the %d it announced", c.announced)
		}
		return n, err
	}
	n, err := c.w.Write(p)
	c.written += int64(n)
	return n, err
}
