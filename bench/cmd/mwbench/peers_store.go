package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mediaworker/mediaworker/objstore"
)

// The store's share: what the worker's job holds that the peers' do not. sharp and imgproxy read the
// photo from a local file and write their variants to local files; the worker fetches the upload from
// its object store (the chunks through its embedded NATS server, the SHA-256 the store recorded
// checked) and puts its three variants back (chunked, hashed, stored by the server). Measured alone,
// in each round, by the benchmark's own Go client doing exactly those two steps against the worker's
// embedded store: this prices the difference in the jobs, so the CPU ratio can also be read for the
// work both sides do (decode, resize, encode, scan).

// storeShare fetches each of keys from bucket (as the worker's download does) and puts the files of
// the matching variant dir back under a scratch prefix (as the worker's upload does), one photo after
// another, and returns the CPU seconds per photo of the two sides (this process and the worker's).
func storeShare(ctx context.Context, f *storeFetch, bucket string, keys, variantDirs []string, work string) (float64, error) {
	if len(keys) == 0 || len(keys) != len(variantDirs) {
		return 0, fmt.Errorf("store share: %d keys for %d variant dirs", len(keys), len(variantDirs))
	}
	c0 := f.cpu()
	for i, key := range keys {
		tmp, err := os.MkdirTemp(work, "share-")
		if err != nil {
			return 0, err
		}
		_, err = objstore.DownloadFile(ctx, f.store, bucket, key, filepath.Join(tmp, "upload"), 0)
		_ = os.RemoveAll(tmp)
		if err != nil {
			return 0, fmt.Errorf("store share: fetching %s: %w", key, err)
		}
		variants, err := filepath.Glob(filepath.Join(variantDirs[i], "*.webp"))
		if err != nil || len(variants) == 0 {
			return 0, fmt.Errorf("store share: no variants in %s", variantDirs[i])
		}
		for _, v := range variants {
			dst := "peers-share/" + strconv.Itoa(i) + "/" + filepath.Base(v)
			if _, err := objstore.UploadFile(ctx, f.store, bucket, dst, v, "image/webp"); err != nil {
				return 0, fmt.Errorf("store share: putting %s: %w", dst, err)
			}
		}
	}
	return (f.cpu() - c0).Seconds() / float64(len(keys)), nil
}
