package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/tracing"
	"github.com/rs/zerolog"
)

// bindCommon registers the settings `run` and the other commands share: where NATS and the object
// store are.
func bindCommon(c *command, cfg *app.Config) {
	c.bind(&settingsOf{Config: cfg}, func(st setting) bool { return st.scope == shared })
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.DefaultConfig()
	c := newCommand("run", "Run the worker. Without --nats-url (or NATS_URL) it starts an embedded NATS JetStream server\nwith its store under --data-dir, listening on --nats-listen so the nats CLI can connect.", "")
	own := bindRunSettings(c, &cfg)
	logLevel, logFormat, clamdWait := &own.LogLevel, &own.LogFormat, &own.ClamdWait
	if _, code, ok := parseOrUsage(c, args, stdout, stderr); !ok {
		return code
	}
	if !applyRecipes(c, &cfg, stderr) {
		return exitUsage
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker run: %v\n", err)
		return exitUsage
	}
	for _, d := range slices.Concat(c.deprecated, c.emptyVars) {
		log.Warn().Msg(d)
	}
	for _, o := range c.overrides {
		log.Info().Msg(o)
	}
	if c.file != nil {
		log.Info().Str("file", c.file.path).Strs("recipes", recipeNames(cfg.Pipeline.Recipes)).Msg("settings read from the config file (variables and flags override it)")
	}
	// clamd is asked to scan whatever the worker accepts.
	cfg.Scanner.MaxStreamBytes = cfg.Pipeline.MaxInputBytes
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "mediaworker run: %s\n", oneLine(invalidSettings(c, args, bindRunSettings, err)))
		return exitUsage
	}
	if *clamdWait < 0 {
		fmt.Fprintf(stderr, "mediaworker run: --clamd-wait (MW_CLAMD_WAIT) is %s: it must be 0 or more\n", *clamdWait)
		return exitUsage
	}
	if err := app.PreflightLocal(cfg); err != nil {
		return failStart(stderr, exitFailure, err)
	}
	// From here start-up may wait minutes (clamd loading its database, NATS): HTTP answers at once and
	// says what it waits for, and the log says it when the wait begins, not when it gives up.
	var starting *app.Starting
	if cfg.HTTPAddr != "" {
		if starting, err = app.ServeStarting(cfg.HTTPAddr); err != nil {
			return failStart(stderr, exitFailure, err)
		}
		defer starting.Close()
	}
	starting.Set(fmt.Sprintf("checking clamd at %s", cfg.Scanner.Addr))
	if err := app.WaitForClamd(ctx, cfg, *clamdWait, func(msg string) {
		log.Warn().Str("clamd", cfg.Scanner.Addr).Str("http", cfg.HTTPAddr).Msg(msg)
		starting.Set(msg)
	}); err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		return failStart(stderr, exitFailure, err)
	}
	starting.Set("connecting to NATS, provisioning the streams and opening the object store")
	if tuneGoMemory() {
		log.Debug().Int("gogc", defaultGOGC).Int64("gomemlimit", defaultGoMemLimit).Msg("Go GC tuned for a bounded peak (set GOGC or GOMEMLIMIT to choose yourself)")
	}
	shutdownTracing, err := tracing.Setup(ctx, version)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker run: %s\n", oneLine(fmt.Sprintf("setting up tracing: %v; check the OTEL_* variables", err)))
		return exitUsage
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	if tracing.Enabled() {
		log.Info().Msg("tracing on: exporting spans over OTLP/HTTP as the OTEL_* variables say")
	}
	libvips := make(chan error, 1) // checked beside start-up, which takes longer
	// Only an instance that serves a lane transformed in process (images) needs libvips (a videos-only
	// box may lack it).
	if slices.ContainsFunc(cfg.ServedLanes(), inProcess) {
		go func() { libvips <- checkLibvips(ctx) }()
	} else {
		libvips <- nil
	}
	a, err := starting.NewApp(ctx, cfg, log)
	if err != nil && ctx.Err() != nil {
		log.Info().Msg("stopped during start-up")
		return exitOK
	}
	if err != nil {
		return failStart(stderr, exitFailure, err)
	}
	defer a.Close()
	if err := <-libvips; err != nil {
		return failStart(stderr, exitFailure, fmt.Errorf("%w; install libvips (scripts/install-deps.sh) — images cannot be transformed without it", err))
	}
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("stopped with an error")
		return exitFailure
	}
	return exitOK
}

// inProcess says whether kind's transforms run in the worker's own process (libvips).
func inProcess(k job.Kind) bool {
	s, _ := job.SpecOf(k)
	return s.InProcess
}

// bindRun registers the rest of run's settings that live in cfg (bindCommon's and run's own apart).
func bindRun(c *command, cfg *app.Config) {
	c.bind(&settingsOf{Config: cfg}, func(st setting) bool { return st.scope != shared && st.scope != runsOwn })
}

func newLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("log level %q: use trace, debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w}
	case "auto":
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			w = zerolog.ConsoleWriter{Out: w}
		}
	default:
		return zerolog.Nop(), fmt.Errorf("log format %q: use json, console or auto", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// checkLibvips makes sure libvips can be loaded before the worker takes jobs. The worker loads it
// only at its first image (an idle worker, or one that only sees videos, never maps its ~130
// libraries), so a missing or broken libvips would otherwise show as every image job failing. The
// check runs `mediaworker version` (which loads it) in a child process, so this one stays lean.
func checkLibvips(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return nil // cannot find ourselves: the first image will tell
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.LastIndex(msg, "mediaworker version: "); i >= 0 {
			msg = msg[i+len("mediaworker version: "):]
		}
		return fmt.Errorf("checking libvips: %s", msg)
	}
	return nil // started and succeeded, or could not be started at all: nothing to say about libvips
}
