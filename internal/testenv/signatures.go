package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// OfficialSignature is the one signature in the database InstallDailyDatabase writes: it matches the
// text "mediaworker-official-test" and nothing real.
const OfficialSignature = "MediaWorker.Test.Official"

// InstallDailyDatabase gives the running clamd a "daily" database in the official container format,
// claiming the given version and build time, and restarts clamd so that it loads it. clamd then answers
// VERSION as it does with freshclam's databases ("ClamAV 1.4.6/<version>/<ctime of built>") instead of
// the dev database's bare "ClamAV 1.4.6", so signature freshness can be tested against the real daemon.
//
// It is a .cud file: the .cvd layout (a 512-byte "ClamAV-VDB:" header, then a tar.gz holding COPYING,
// daily.info and the signatures) that clamd loads without the ClamAV digital signature a .cvd needs. The
// header's version, signature count, functionality level and build time must equal daily.info's, and
// its MD5 field the tar.gz's, or clamd refuses it as a corrupted CVD header.
func InstallDailyDatabase(c *Clamd, version uint64, built time.Time) {
	c.t.Helper()
	ndb := []byte(OfficialSignature + ":0:*:" + hex.EncodeToString([]byte("mediaworker-official-test")) + "\n")
	sum := sha256.Sum256(ndb)
	header := func(md5sum string) string {
		// name:build time:version:signatures:functionality level:md5:dsig:builder:build time (Unix)
		return fmt.Sprintf("ClamAV-VDB:%s:%d:1:90:%s:unsigned:mediaworker-tests:%d",
			built.UTC().Format("02 Jan 2006 15-04 -0700"), version, md5sum, built.Unix())
	}
	info := header("x") + "\n" + fmt.Sprintf("daily.ndb:%d:%s\n", len(ndb), hex.EncodeToString(sum[:]))

	var body bytes.Buffer
	gz := gzip.NewWriter(&body)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		data []byte
	}{{"COPYING", []byte("Test database of the mediaworker project; detects nothing real.\n")}, {"daily.info", []byte(info)}, {"daily.ndb", ndb}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: built, Format: tar.FormatGNU}); err != nil {
			c.t.Fatalf("writing the test database: %v", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			c.t.Fatalf("writing the test database: %v", err)
		}
	}
	if err := tw.Close(); err != nil {
		c.t.Fatalf("writing the test database: %v", err)
	}
	if err := gz.Close(); err != nil {
		c.t.Fatalf("writing the test database: %v", err)
	}
	md5sum := md5.Sum(body.Bytes())
	head := []byte(header(hex.EncodeToString(md5sum[:])))
	if len(head) > 512 {
		c.t.Fatalf("test database header is %d bytes, over 512", len(head))
	}
	cud := append(append(head, bytes.Repeat([]byte(" "), 512-len(head))...), body.Bytes()...)
	if err := os.WriteFile(filepath.Join(c.Dir, "db", "daily.cud"), cud, 0o644); err != nil {
		c.t.Fatalf("installing the test database: %v", err)
	}
	c.Stop()
	c.Start()
}
