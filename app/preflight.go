package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/scanner"
)

// SettingError is a start-up check that failed because of one setting: Field is the setting's path in
// Config ("NATS.Embedded.DataDir", "Pipeline.TmpDir", "HTTPAddr"), Fix says what to change, naming
// fields the same way. The command maps Field to the names a person types (its flag, variable and
// config-file key) and prints it as one line, so an operator reads the cause and the remedy without a
// stack of log lines.
type SettingError struct {
	Field string
	Err   error
	Fix   string
}

func (e *SettingError) Error() string {
	if e.Fix == "" {
		return fmt.Sprintf("%s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %v; %s", e.Field, e.Err, e.Fix)
}

func (e *SettingError) Unwrap() error { return e.Err }

// Preflight checks, before anything is started, what would otherwise fail late or obscurely: the data
// and scratch directories are writable, the listen ports are free, and clamd answers within clamdWait
// (a clamd loading its database refuses connections for a minute or so) with limits that cover the
// input cap. Every failure is a *SettingError naming the setting to change.
func Preflight(ctx context.Context, cfg Config, clamdWait time.Duration) error {
	if err := PreflightLocal(cfg); err != nil {
		return err
	}
	return WaitForClamd(ctx, cfg, clamdWait, nil)
}

// PreflightLocal is Preflight's checks of this machine (directories, ports), which take no time: run
// before anything listens, so start-up can then serve HTTP while it waits for clamd.
func PreflightLocal(cfg Config) error {
	// Ownership and mode first: a dir another user may write is refused before we write anything in it.
	if cfg.NATS.URL == "" {
		if err := privateDir(cfg.NATS.Embedded.DataDir, dataDirSetting); err != nil {
			return &SettingError{Field: dataDirSetting.field, Err: err} // the error says the fix
		}
	}
	if err := privateDir(cfg.Pipeline.TmpDir, tmpDirSetting); err != nil {
		return &SettingError{Field: tmpDirSetting.field, Err: err}
	}
	if cfg.NATS.URL == "" {
		if err := writableDir(filepath.Join(cfg.NATS.Embedded.DataDir, "jetstream")); err != nil {
			return &SettingError{Field: dataDirSetting.field, Err: err, Fix: "point it at a directory this user can create and write"}
		}
		if err := portFree(cfg.NATS.Embedded.Listen); err != nil {
			return &SettingError{Field: "NATS.Embedded.Listen", Err: err,
				Fix: "stop what listens there, or choose another address (another mediaworker? give each its own NATS.Embedded.Listen and NATS.Embedded.DataDir)"}
		}
	}
	if err := writableDir(cfg.Pipeline.TmpDir); err != nil {
		return &SettingError{Field: tmpDirSetting.field, Err: err, Fix: "point it at a directory this user can create and write"}
	}
	if cfg.HTTPAddr != "" {
		if err := portFree(cfg.HTTPAddr); err != nil {
			return &SettingError{Field: "HTTPAddr", Err: err, Fix: "stop what listens there, choose another address, or set it empty to disable HTTP"}
		}
	}
	return nil
}

// WaitForClamd waits up to wait for clamd's PONG, then asks CheckLimits whether clamd scans every input
// up to the cap (its defaults pass what they cannot scan as clean). waiting, if not nil, is called once,
// at the first PING clamd does not answer, with a message saying what start-up waits for, so a person
// watching learns it at once rather than when the wait ends.
func WaitForClamd(ctx context.Context, cfg Config, wait time.Duration, waiting func(msg string)) error {
	s, err := scanner.New(cfg.Scanner)
	if err != nil {
		return &SettingError{Field: "Scanner.Addr", Err: err}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		// Each PING has its own budget, so a wait of 0 still asks once.
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err = s.Ping(pctx)
		pcancel()
		if err == nil {
			break
		}
		if waiting != nil {
			waiting(fmt.Sprintf("waiting for clamd at %s (up to %s, the clamd wait; a clamd loading its database answers within a minute or two): %v",
				cfg.Scanner.Addr, wait, err))
			waiting = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			return &SettingError{Field: "Scanner.Addr", Err: fmt.Errorf("clamd at %s did not answer PING within %s: %w", cfg.Scanner.Addr, wait, err),
				Fix: "start clamd (it needs a signature database) or correct the address; the clamd wait (clamd.wait in the config file) sets how long start-up waits for it"}
		case <-time.After(time.Second):
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	defer lcancel()
	err = s.CheckLimits(lctx, cfg.Pipeline.MaxInputBytes)
	switch {
	case err == nil:
		return nil
	case scanner.IsMisconfigured(err) && strings.Contains(err.Error(), "AlertExceedsMax"):
		return &SettingError{Field: "Scanner.Addr", Err: fmt.Errorf("clamd at %s passes what it cannot scan as clean: %w", cfg.Scanner.Addr, err),
			Fix: "set AlertExceedsMax yes in its clamd.conf, or point Scanner.Addr at a clamd configured so"}
	case scanner.IsMisconfigured(err):
		return &SettingError{Field: "Pipeline.MaxInputBytes", Err: fmt.Errorf("clamd at %s cannot scan inputs up to %d bytes: %w", cfg.Scanner.Addr, cfg.Pipeline.MaxInputBytes, err),
			Fix: "raise StreamMaxLength, MaxFileSize and MaxScanSize in clamd.conf to at least this cap (with AlertExceedsMax yes), or lower Pipeline.MaxInputBytes"}
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return &SettingError{Field: "Scanner.Addr", Err: fmt.Errorf("checking clamd's limits at %s: %w", cfg.Scanner.Addr, err), Fix: "check that clamd is healthy"}
	}
}

// writableDir creates dir if needed and proves a file can be created in it.
func writableDir(dir string) error {
	if dir == "" {
		return errors.New("is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".mediaworker-preflight-*")
	if err != nil {
		return fmt.Errorf("writing in %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// portFree reports whether addr can be listened on now. Port 0 (and -1, nats-server's "random port")
// always can: the listener picks a free one.
func portFree(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err == nil && (port == "0" || port == "-1") {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	return ln.Close()
}
