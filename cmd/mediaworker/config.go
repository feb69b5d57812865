package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/mediaworker/mediaworker/app"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

// secretFlags are printed masked by `config`.
var secretFlags = map[string]bool{"s3-secret-key": true, "scan-api-token": true, "nats-password": true, "nats-token": true, "url-signing-key": true}

func cmdConfig(_ context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.DefaultConfig()
	c := newCommand("config", "Print the settings `mediaworker run` would use with these flags and this environment, with\nwhere each value came from (default, flag, or the variable's name). Secrets are masked.\nTakes the same flags as run.", "")
	bindCommon(c, &cfg)
	bindRun(c, &cfg)
	bindLog(c)
	bindStartup(c)
	if _, code, ok := parseOrUsage(c, args, stdout, stderr); !ok {
		return code
	}
	var flags []*flag.Flag
	c.fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM")
	for _, f := range flags {
		v := f.Value.String()
		if secretFlags[f.Name] && v != "" {
			v = "****"
		}
		if f.Name == "nats-url" {
			v = natsjs.RedactURLs(v) // nats://user:pass@host carries a password
		}
		if v == "" {
			v = `""`
		}
		from := c.source[f.Name]
		if from == "" {
			from = "default"
		}
		fmt.Fprintf(tw, "--%s\t%s\t%s\n", f.Name, v, from)
	}
	tw.Flush()
	cfg.Scanner.MaxStreamBytes = cfg.Pipeline.MaxInputBytes // as run does
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "\nthese settings would not start: %s\n", oneLine(invalidSettings(c, args, bindRunSettings, err)))
		return exitUsage
	}
	return exitOK
}
