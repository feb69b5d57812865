package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrivateDirCreatesItOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "scratch")
	if err := privateDir(dir, tmpDirSetting); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("created %v with mode %v, want 0700", err, st.Mode().Perm())
	}
	if err := privateDir(dir, tmpDirSetting); err != nil {
		t.Fatalf("our own 0700 dir refused: %v", err)
	}
}

func TestPrivateDirRefusesWritableByOthers(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o1777, 0o770, 0o702} {
		dir := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		err := privateDir(dir, tmpDirSetting)
		if err == nil || !strings.Contains(err.Error(), "tmp dir (Pipeline.TmpDir) "+dir+" is writable by other users") ||
			!strings.Contains(err.Error(), "chmod 700") || !strings.Contains(err.Error(), "point Pipeline.TmpDir at") {
			t.Errorf("mode %04o: %v, want a refusal naming Pipeline.TmpDir and the fix", mode, err)
		}
	}
	// A symlink to such a dir is no way around it.
	target := filepath.Join(t.TempDir(), "open")
	_ = os.Mkdir(target, 0o700)
	_ = os.Chmod(target, 0o777)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := privateDir(link, dataDirSetting); err == nil {
		t.Error("a symlink to a world-writable dir was accepted")
	}
	file := filepath.Join(t.TempDir(), "file")
	_ = os.WriteFile(file, nil, 0o600)
	if err := privateDir(file, dataDirSetting); err == nil {
		t.Error("a file was accepted as a dir")
	}
}

// A dir another user owns is refused even with mode 0700: its owner could still swap the files in it.
// As root the test gives its own dir away; otherwise "/" (root's) is such a dir.
func TestPrivateDirRefusesAnotherOwner(t *testing.T) {
	dir := "/"
	if os.Geteuid() == 0 {
		dir = filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	err := privateDir(dir, tmpDirSetting)
	if err == nil || !strings.Contains(err.Error(), "tmp dir (Pipeline.TmpDir) "+dir+" is owned by uid") || !strings.Contains(err.Error(), "not by this user") {
		t.Fatalf("a dir owned by another user: %v, want a refusal naming Pipeline.TmpDir and the owner", err)
	}
}
