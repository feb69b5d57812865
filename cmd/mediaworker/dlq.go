package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mediaworker/mediaworker/app"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go/jetstream"
)

func cmdDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.DefaultConfig()
	c := newCommand("dlq", `Inspect and manage dead letters (requests that could not be processed).
  ls                      list entries: sequence, time, mediaId, reason, deliveries, last error
  show SEQ                one entry with its headers and the original payload
  replay SEQ...|--all     republish the original payloads to the request subject, then remove them
  purge SEQ...|--all      remove entries for good`, "ls | show SEQ | replay SEQ...|--all | purge SEQ...|--all")
	bindCommon(c, &cfg)
	asJSON, all, limit := false, false, 100
	c.fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	c.fs.BoolVar(&all, "all", false, "with replay or purge: every entry")
	c.fs.IntVar(&limit, "limit", limit, "with ls: at most this many entries (0 = all)")
	rest, code, ok := parseOrUsage(c, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(rest) == 0 {
		c.printUsage(stderr)
		return exitUsage
	}
	action, rest := rest[0], rest[1:]
	seqs, err := parseSeqs(rest)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker dlq %s: %v\n", action, err)
		return exitUsage
	}

	ctx, stop, js, err := connectJS(ctx, cfg, "mediaworker dlq", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker dlq: %v\n", err)
		return exitFailure
	}
	defer stop()
	d := natsjs.NewDLQ(js, cfg.Streams)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	switch action {
	case "ls", "list":
		list, err := d.List(ctx, limit)
		if err != nil {
			fmt.Fprintf(stderr, "mediaworker dlq ls: %v\n", err)
			return exitFailure
		}
		if asJSON {
			return printJSON(stdout, list)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tTIME\tMEDIA ID\tREASON\tDELIVERIES\tLAST ERROR")
		for _, e := range list {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", e.Seq, e.Time.Local().Format(time.DateTime), orDash(e.MediaID), e.Reason, e.Deliveries, clip(e.LastError, 80))
		}
		tw.Flush()
		if len(list) == 0 {
			fmt.Fprintln(stderr, "the dead-letter stream is empty")
		}
		return exitOK
	case "show":
		if len(seqs) != 1 {
			fmt.Fprintln(stderr, "mediaworker dlq show: name exactly one SEQ")
			return exitUsage
		}
		e, err := d.Get(ctx, seqs[0])
		if err != nil {
			fmt.Fprintf(stderr, "mediaworker dlq show: %v\n", err)
			return exitFailure
		}
		if asJSON {
			return printJSON(stdout, e)
		}
		fmt.Fprintf(stdout, "seq:        %d\ntime:       %s\nmediaId:    %s\nreason:     %s\ndeliveries: %d\nlast error: %s\nheaders:\n",
			e.Seq, e.Time.Local().Format(time.RFC3339), orDash(e.MediaID), e.Reason, e.Deliveries, orDash(e.LastError))
		for k, vs := range e.Header {
			fmt.Fprintf(stdout, "  %s: %s\n", k, strings.Join(vs, ", "))
		}
		fmt.Fprintf(stdout, "payload:\n%s\n", e.PayloadText)
		return exitOK
	case "replay", "purge":
		if all == (len(seqs) > 0) {
			fmt.Fprintf(stderr, "mediaworker dlq %s: name SEQ... or --all (not both)\n", action)
			return exitUsage
		}
		if action == "purge" && all {
			n, err := d.Purge(ctx)
			if err != nil {
				fmt.Fprintf(stderr, "mediaworker dlq purge: %v\n", err)
				return exitFailure
			}
			fmt.Fprintf(stdout, "purged %d dead letters\n", n)
			return exitOK
		}
		if all {
			list, err := d.List(ctx, 0)
			if err != nil {
				fmt.Fprintf(stderr, "mediaworker dlq replay: %v\n", err)
				return exitFailure
			}
			for _, e := range list {
				seqs = append(seqs, e.Seq)
			}
		}
		failed := 0
		for _, s := range seqs {
			var err error
			if action == "replay" {
				err = d.Replay(ctx, s)
			} else {
				err = d.Delete(ctx, s)
			}
			if err != nil {
				failed++
				fmt.Fprintf(stderr, "mediaworker dlq %s %d: %v\n", action, s, err)
				continue
			}
			verb := "replayed"
			if action == "purge" {
				verb = "purged"
			}
			fmt.Fprintf(stdout, "%s %d\n", verb, s)
		}
		if failed > 0 {
			return exitFailure
		}
		return exitOK
	}
	fmt.Fprintf(stderr, "mediaworker dlq: unknown action %q (ls, show, replay or purge)\n", action)
	return exitUsage
}

func parseSeqs(args []string) ([]uint64, error) {
	var out []uint64
	for _, a := range args {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q is not a stream sequence (see `mediaworker dlq ls`)", a)
		}
		out = append(out, n)
	}
	return out, nil
}

// connectJS connects like `submit` does: --nats-url, NATS_URL, or the default local server. The context
// it returns ends at the first permissions violation, which it reports on stderr: NATS gives a request
// the user may not make no reply at all, so without this a command run with another role's credentials
// would wait out its timeout in silence. stop closes the connection and releases the context.
func connectJS(ctx context.Context, cfg app.Config, name string, stderr io.Writer) (context.Context, func(), jetstream.JetStream, error) {
	if err := cfg.NATS.Auth.Validate(); err != nil {
		return ctx, nil, nil, toldError{err}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	var once sync.Once
	denied := func(err error) {
		once.Do(func() {
			fmt.Fprintf(stderr, "%s: %v: this NATS user may not do that; use credentials with that permission (with deploy/nats/accounts.conf: ops for dlq, worker for streams apply)\n", name, err)
			cancel(err)
		})
	}
	nc, js, err := natsjs.Connect(natsjs.ConnectConfig{URL: cfg.NATS.URL, Name: name, Auth: cfg.NATS.Auth, Denied: denied})
	if err != nil {
		cancel(err)
		if natsjs.AuthHint(err) == "" {
			err = fmt.Errorf("%w (is `mediaworker run` running?)", err)
		}
		return ctx, nil, nil, toldError{err}
	}
	return ctx, func() { nc.Close(); cancel(nil) }, js, nil
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		return exitFailure
	}
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
