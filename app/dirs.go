package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// dirSetting names a directory setting for privateDir's errors: what it is in words, and its field in
// Config.
type dirSetting struct{ what, field string }

// The directories privateDir checks.
var (
	dataDirSetting = dirSetting{"data dir", "NATS.Embedded.DataDir"}
	tmpDirSetting  = dirSetting{"tmp dir", "Pipeline.TmpDir"}
)

// String is the setting as the errors name it: "tmp dir (Pipeline.TmpDir)".
func (s dirSetting) String() string { return s.what + " (" + s.field + ")" }

// privateDir makes dir (and missing parents) with mode 0700, or checks that an existing one is this
// user's own: owned by our effective uid and not writable by group or others. The default scratch dir
// sits in the shared temp dir, where another local user could create it first and then swap job files
// or hold the lock; a data dir anyone can write lets them rewrite the JetStream store. setting names
// the config field for the error.
func privateDir(dir string, setting dirSetting) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s %s: %w", setting, dir, err)
	}
	// A symlink counts as what it is and what it points to: both must be ours.
	lst, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checking %s %s: %w", setting, dir, err)
	}
	if err := ownedByUs(dir, lst, setting); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("checking %s %s: %w", setting, dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s is not a directory", setting, dir)
	}
	if err := ownedByUs(dir, st, setting); err != nil {
		return err
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s %s is writable by other users (mode %04o): another user could swap its files; run `chmod 700 %s` or point %s at a directory of your own",
			setting, dir, perm, dir, setting.field)
	}
	return nil
}

func ownedByUs(dir string, st fs.FileInfo, setting dirSetting) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("checking " + setting.String() + ": no owner information on this system")
	}
	if uid := os.Geteuid(); int(sys.Uid) != uid {
		return fmt.Errorf("%s %s is owned by uid %d, not by this user (uid %d): another user may have created it; remove it or point %s at a directory of your own",
			setting, dir, sys.Uid, uid, setting.field)
	}
	return nil
}
