// Package scanner is mediaworker's clamd client. It streams an input to clamd with INSTREAM, accounts
// for every byte, puts deadlines on every read and write, and turns clamd's reply into a strict Verdict
// or a typed *Error. It never reports clean unless clamd said "stream: OK" for exactly the announced
// bytes. On a unix socket, ScanFile hands clamd the open file instead (FILDES, fildes.go), and a file
// that changed during the scan is an error.
//
// It is a leaf: it knows nothing of NATS, object stores or the pipeline. Errors say whether the input is
// refused (IsRefused: permanent) or the scan merely failed (everything else: transient).
package scanner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

const (
	// DefaultAddr is clamd's TCP socket in deploy/clamav/clamd.conf.
	DefaultAddr = "tcp://127.0.0.1:3310"
	// DefaultMaxStreamBytes is the worker's default input cap (500 MiB). deploy/clamav/clamd.conf sets
	// StreamMaxLength, MaxFileSize and MaxScanSize above it.
	DefaultMaxStreamBytes = 500 << 20
	// MaxChunkSize bounds Config.ChunkSize; larger chunks only cost memory.
	MaxChunkSize = 16 << 20
	// maxStreamLimit is the largest MaxStreamBytes clamd can be configured to accept: its size settings
	// and the INSTREAM chunk lengths are 32-bit, and clamd rejects limits of 4 GB and more.
	maxStreamLimit = 4<<30 - 1
)

// Config configures a Scanner.
type Config struct {
	// Addr is clamd's address: "tcp://host:port" or "unix:///path/to/clamd.ctl".
	Addr string
	// DialTimeout bounds connecting to clamd.
	DialTimeout time.Duration
	// IOTimeout bounds every single write to clamd and every read of a reply to a quick command.
	IOTimeout time.Duration
	// ScanTimeout bounds the wait for the verdict after the whole input has been sent, when clamd
	// actually scans. Keep it above clamd's MaxScanTime so that clamd's own limit answers first.
	ScanTimeout time.Duration
	// ChunkSize is the INSTREAM chunk size in bytes.
	ChunkSize int
	// MaxStreamBytes is the largest input Scan accepts; larger inputs are refused before connecting.
	// Set it to the worker's input cap, and clamd's StreamMaxLength, MaxFileSize and MaxScanSize at
	// least as high, or clamd refuses (or, with AlertExceedsMax off, skips) what the worker sends.
	MaxStreamBytes int64
}

// DefaultConfig returns the settings that match deploy/clamav/clamd.conf.
func DefaultConfig() Config {
	return Config{
		Addr:        DefaultAddr,
		DialTimeout: 5 * time.Second,
		IOTimeout:   30 * time.Second,
		// deploy/clamav/clamd.conf sets MaxScanTime 300000 (5 min).
		ScanTimeout:    5*time.Minute + 30*time.Second,
		ChunkSize:      256 << 10,
		MaxStreamBytes: DefaultMaxStreamBytes,
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := parseAddr(c.Addr); err != nil {
		errs = append(errs, err)
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("dial timeout must be positive, got %s", c.DialTimeout))
	}
	if c.IOTimeout <= 0 {
		errs = append(errs, fmt.Errorf("I/O timeout must be positive, got %s", c.IOTimeout))
	}
	if c.ScanTimeout <= 0 {
		errs = append(errs, fmt.Errorf("scan timeout must be positive, got %s", c.ScanTimeout))
	}
	if c.ChunkSize <= 0 || c.ChunkSize > MaxChunkSize {
		errs = append(errs, fmt.Errorf("chunk size must be between 1 and %d bytes, got %d", MaxChunkSize, c.ChunkSize))
	}
	if c.MaxStreamBytes <= 0 || c.MaxStreamBytes > maxStreamLimit {
		errs = append(errs, fmt.Errorf("max stream bytes must be between 1 and %d, got %d", int64(maxStreamLimit), c.MaxStreamBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("validating scanner config: %w", err)
	}
	return nil
}

// parseAddr turns "tcp://host:port" or "unix:///path" into a network and address for net.Dial.
func parseAddr(addr string) (network, address string, err error) {
	u, err := url.Parse(addr)
	if err != nil {
		return "", "", fmt.Errorf("parsing clamd address %q: %w", addr, err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("clamd address %q: unexpected user, query or fragment", addr)
	}
	switch u.Scheme {
	case "tcp":
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil || host == "" || port == "" || (u.Path != "" && u.Path != "/") {
			return "", "", fmt.Errorf("clamd address %q: want tcp://host:port", addr)
		}
		return "tcp", u.Host, nil
	case "unix":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return "", "", fmt.Errorf("clamd address %q: want unix:///absolute/path", addr)
		}
		return "unix", u.Path, nil
	default:
		return "", "", fmt.Errorf("clamd address %q: scheme must be tcp or unix", addr)
	}
}

// Scanner talks to one clamd. It holds no connections (each command uses a fresh one, as clamd closes
// it after every reply outside a session), so it is safe for concurrent use and needs no Close.
type Scanner struct {
	cfg     Config
	network string
	address string
}

// New returns a Scanner for cfg. It does not connect; use Ping to check clamd.
func New(cfg Config) (*Scanner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	network, address, _ := parseAddr(cfg.Addr)
	return &Scanner{cfg: cfg, network: network, address: address}, nil
}

// ScanFile scans the regular file at path: it opens it and takes its size from Stat. On a unix socket
// it passes clamd the open file (FILDES, fildes.go); otherwise it streams it with Scan. Either way a
// file that changes size while it is scanned is an error, not a verdict.
func (s *Scanner) ScanFile(ctx context.Context, path string) (Verdict, error) {
	f, err := os.Open(path)
	if err != nil {
		return Verdict{}, fmt.Errorf("opening file to scan: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Verdict{}, fmt.Errorf("inspecting file to scan: %w", err)
	}
	// A FIFO or device has no meaningful size and may never end.
	if !fi.Mode().IsRegular() {
		return Verdict{}, fmt.Errorf("scanning %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if s.ScansInPlace() {
		return s.scanDescriptor(ctx, f, fi) // fildes.go
	}
	return s.Scan(ctx, f, fi.Size())
}

// Ping checks that clamd answers PONG.
func (s *Scanner) Ping(ctx context.Context) error {
	const op = "pinging clamd"
	reply, err := s.command(ctx, op, "zPING\x00")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("reply %s is not PONG", quote(reply))}
	}
	return nil
}

// Version returns clamd's version line, e.g. "ClamAV 1.4.6/27480/Tue Nov 18 09:30:02 2025" (engine,
// database version and date; only the engine when no official database is loaded).
func (s *Scanner) Version(ctx context.Context) (string, error) {
	const op = "asking clamd's version"
	reply, err := s.command(ctx, op, "zVERSION\x00")
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(reply, "ClamAV ") || strings.ContainsFunc(reply, isControl) {
		return "", &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("reply %s is not a ClamAV version", quote(reply))}
	}
	return reply, nil
}
