package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/app"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

func cmdStreams(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.DefaultConfig()
	c := newCommand("streams", "print: write the stream and consumer definitions as JSON (all of them, or one of\n  requests | responses | dlq | advisories | consumer (triage) | "+laneConsumers(" | ", " | ")+" |\n  advisory-consumer, in the form `nats stream add --config FILE` and\n  `nats consumer add --config FILE` accept; --out-dir writes one file each).\napply: create or update them, and the key-value buckets (settled requests, verdicts, reuse), on the\n  NATS at --nats-url (idempotent).", "print [NAME] | apply")
	// The settings of the definitions it writes, as run declares them.
	c.bind(&settingsOf{Config: &cfg}, func(st setting) bool { return st.scope == shared || st.scope == streamsToo })
	outDir := ""
	c.fs.StringVar(&outDir, "out-dir", "", "with print: write one JSON file per definition here")
	rest, code, ok := parseOrUsage(c, args, stdout, stderr)
	if !ok {
		return code
	}
	if err := errors.Join(cfg.Streams.Validate(), cfg.Reuse.Validate()); err != nil {
		fmt.Fprintf(stderr, "mediaworker streams: %s\n", withFlags(oneLine(err.Error())))
		return exitUsage
	}
	if len(rest) == 0 {
		c.printUsage(stderr)
		return exitUsage
	}
	switch rest[0] {
	case "print":
		return streamsPrint(cfg.Streams, rest[1:], outDir, stdout, stderr)
	case "apply":
		return streamsApply(ctx, cfg, stdout, stderr)
	}
	fmt.Fprintf(stderr, "mediaworker streams: unknown action %q (print or apply)\n", rest[0])
	return exitUsage
}

func definitions(sc natsjs.Config) map[string]any {
	s := sc.StreamConfigs()
	defs := map[string]any{"requests": s[0], "responses": s[1], "dlq": s[2], "advisories": s[3],
		"consumer": sc.ConsumerConfig(), "advisory-consumer": sc.AdvisoryCapture().ConsumerConfig()}
	for _, l := range natsjs.Lanes {
		defs["consumer-"+string(l)] = sc.Lane(l).ConsumerConfig()
	}
	return defs
}

func streamsPrint(sc natsjs.Config, which []string, outDir string, stdout, stderr io.Writer) int {
	defs := definitions(sc)
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "mediaworker streams print: %v\n", err)
			return exitFailure
		}
		names := make([]string, 0, len(defs))
		for name := range defs {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			b, _ := json.MarshalIndent(defs[name], "", "  ")
			p := filepath.Join(outDir, name+".json")
			if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
				fmt.Fprintf(stderr, "mediaworker streams print: %v\n", err)
				return exitFailure
			}
			fmt.Fprintln(stdout, p)
		}
		return exitOK
	}
	var v any = defs
	if len(which) > 0 {
		d, ok := defs[which[0]]
		if !ok {
			fmt.Fprintf(stderr, "mediaworker streams print: unknown definition %q (requests, responses, dlq, advisories, consumer, %s or advisory-consumer)\n", which[0], laneConsumers(", ", ", "))
			return exitUsage
		}
		v = d
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintln(stdout, string(b))
	return exitOK
}

func streamsApply(ctx context.Context, cfg app.Config, stdout, stderr io.Writer) int {
	ctx, stop, js, err := connectJS(ctx, cfg, "mediaworker streams apply", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker streams apply: %v\n", err)
		return exitFailure
	}
	defer stop()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := natsjs.Provision(actx, js, cfg.Streams); err != nil {
		fmt.Fprintf(stderr, "mediaworker streams apply: %v\n", err)
		return exitFailure
	}
	if err := natsjs.ProvisionReuse(actx, js, cfg.Streams, cfg.Reuse); err != nil {
		fmt.Fprintf(stderr, "mediaworker streams apply: %v\n", err)
		return exitFailure
	}
	sc := cfg.Streams
	lanes := make([]string, len(natsjs.Lanes))
	for i, l := range natsjs.Lanes {
		lanes[i] = sc.Lane(l).Durable()
	}
	fmt.Fprintf(stdout, "applied streams %s, %s, %s, %s, consumers %s (triage), %s, %s-advisories and key-value buckets %s, %s, %s\n",
		sc.RequestsStream(), sc.ResponsesStream(), sc.DLQStream(), sc.AdvisoryCapture().Stream(), sc.Durable,
		strings.Join(lanes, ", "), sc.Durable, sc.Buckets().Settled(), sc.Buckets().Verdicts(), sc.Buckets().Reuse())
	return exitOK
}
