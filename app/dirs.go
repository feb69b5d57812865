package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// privateDir makes dir (and missing parents) with mode 0700, or checks that an existing one is this
// user's own: owned by our effective uid and not writable by group or others. The default scratch dir
// sits in the shared temp dir, where another local user could create it first and then swap job files
// or hold the lock; a data dir anyone can write lets them rewrite the JetStream store. setting names
// the flag for the error.
func privateDir(dir, setting string) error {
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
			setting, dir, perm, dir, setting)
	}
	return nil
}

func ownedByUs(dir string, st fs.FileInfo, setting string) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("checking " + setting + ": no owner information on this system")
	}
	if uid := os.Geteuid(); int(sys.Uid) != uid {
		return fmt.Errorf("%s %s is owned by uid %d, not by this user (uid %d): another user may have created it; remove it or point %s at a directory of your own",
			setting, dir, sys.Uid, uid, setting)
	}
	return nil
}
