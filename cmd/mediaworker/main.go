// Command mediaworker is the edge media worker: `mediaworker run` pulls optimize requests from NATS
// JetStream, scans each upload with clamd and turns images into WebP and videos into MP4 + poster.
// main only wires: every part lives in its own package and the app package builds them from one Config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitNotAll  = 3 // submit: some request did not succeed
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == renderDocumentCommand {
		// The render child: no signal handling, no settings, nothing but the render (render.go).
		os.Exit(cmdRenderDocument(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

type subcommand struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var subcommands = []subcommand{
	{"run", "run the worker (embedded NATS JetStream unless --nats-url / NATS_URL is set)", cmdRun},
	{"submit", "upload files, publish optimize requests, and with --wait print the responses", cmdSubmit},
	{"streams", "print or apply the stream and consumer definitions", cmdStreams},
	{"dlq", "list, show, replay or purge dead letters", cmdDLQ},
	{"webhooks", "send a signed sample to a webhook URL, make a secret, or enable an endpoint disabled by 410", cmdWebhooks},
	{"config", "print the effective settings of run (secrets masked) and where each came from; `config check FILE` validates a config file", cmdConfig},
	{"healthcheck", "exit 0 when a running worker reports ready (for container health checks)", cmdHealthcheck},
	{"version", "print the version", cmdVersion},
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, sc := range subcommands {
		if sc.name == args[0] {
			// main owns signals: the first SIGINT/SIGTERM starts a graceful stop, a second one kills.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				stop() // restore default handling, so a second signal ends the process at once
			}()
			return sc.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "mediaworker: unknown command %q\n\n", args[0])
	topUsage(stderr)
	return exitUsage
}

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "mediaworker — edge media worker: NATS JetStream requests → clamd scan → WebP / MP4 variants")
	fmt.Fprintln(w, "\nUsage: mediaworker <command> [flags]\n\nCommands:")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-12s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintln(w, "\nRun 'mediaworker <command> --help' for the flags of a command. Every flag can also be set")
	fmt.Fprintln(w, "with an environment variable MW_<FLAG> (e.g. --clamd-addr ↔ MW_CLAMD_ADDR).")
}

// badFlag matches how the flag package names a flag in its errors.
var badFlag = regexp.MustCompile(`for flag -([a-z0-9-]+):`)

// parseOrUsage parses a command's flags; it prints help or the error and returns an exit code when the
// command should not go on.
func parseOrUsage(c *command, args []string, stdout, stderr io.Writer) ([]string, int, bool) {
	rest, err := c.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		c.printUsage(stdout)
		return nil, exitOK, false
	}
	var fe fileError
	if errors.As(err, &fe) {
		// Each mistake in the config file on its own line, at its position.
		for _, l := range errorLines(err) {
			fmt.Fprintf(stderr, "mediaworker %s: %s\n", c.name, l)
		}
		return nil, exitUsage, false
	}
	if err != nil {
		// One line, naming the flag as it is written (--x) and its variable.
		msg := oneLine(err.Error())
		if m := badFlag.FindStringSubmatchIndex(msg); m != nil {
			name := msg[m[2]:m[3]]
			rest := strings.TrimSpace(msg[m[1]:])
			if f := c.fs.Lookup(name); f != nil {
				rest = valueProblem(f, errors.New(rest))
			}
			msg = fmt.Sprintf("%sfor --%s (%s): %s", msg[:m[0]], name, envName(name), rest)
		}
		fmt.Fprintf(stderr, "mediaworker %s: %s; see 'mediaworker %s --help'\n", c.name, msg, c.name)
		return nil, exitUsage, false
	}
	return rest, 0, true
}
