package scanner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Signatures is what clamd's VERSION reply says about its engine and signature database.
//
// With the official databases (freshclam) the reply is "ClamAV 1.4.6/27500/Thu Nov 20 09:30:02 2025":
// engine, daily database version, and the time that database was built. With only unofficial
// signatures (the project's dev database) clamd has no database version and replies "ClamAV 1.4.6": such
// a clamd detects only what those signatures describe, so Dev is set and freshness cannot be judged.
type Signatures struct {
	Engine  string    // "1.4.6"
	Version uint64    // daily database version; 0 when Dev
	Date    time.Time // when that database was built; zero when Dev
	Dev     bool      // no official database loaded: development and tests only
	Reply   string    // the reply as clamd sent it
}

// Age is how old the signature database is at now; 0 for a dev database (it has no date).
func (s Signatures) Age(now time.Time) time.Duration {
	if s.Dev || s.Date.IsZero() {
		return 0
	}
	return max(now.Sub(s.Date), 0)
}

// ParseVersion reads a clamd VERSION reply. It accepts exactly the two shapes clamd sends (see
// Signatures) and reports anything else as a Protocol error naming the reply.
func ParseVersion(reply string) (Signatures, error) {
	const op = "parsing clamd's version"
	bad := func(why string) (Signatures, error) {
		return Signatures{}, &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("reply %s: %s", quote(reply), why)}
	}
	rest, ok := strings.CutPrefix(reply, "ClamAV ")
	if !ok || strings.ContainsFunc(reply, isControl) {
		return bad(`want "ClamAV <engine>[/<db version>/<db date>]"`)
	}
	engine, db, official := strings.Cut(rest, "/")
	if engine == "" || strings.ContainsAny(engine, " ") {
		return bad("no engine version")
	}
	if !official {
		return Signatures{Engine: engine, Dev: true, Reply: reply}, nil
	}
	verText, dateText, ok := strings.Cut(db, "/")
	if !ok {
		return bad("database version without a date")
	}
	ver, err := strconv.ParseUint(verText, 10, 64)
	if err != nil || ver == 0 {
		return bad("database version is not a positive number")
	}
	// clamd formats the build time with ctime(3), i.e. in clamd's local time zone, which the reply does
	// not name. Reading it as UTC is off by at most the zone offset: hours, against a limit of days.
	date, err := time.Parse(time.ANSIC, dateText)
	if err != nil {
		return bad("database date is not a ctime(3) date")
	}
	return Signatures{Engine: engine, Version: ver, Date: date, Reply: reply}, nil
}

// Signatures asks clamd for its version and parses it.
func (s *Scanner) Signatures(ctx context.Context) (Signatures, error) {
	reply, err := s.Version(ctx)
	if err != nil {
		return Signatures{}, err
	}
	return ParseVersion(reply)
}
