package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mediaworker/mediaworker/app"
	"github.com/nats-io/nats.go"
)

// Start-up failures are printed as one plain line on stderr, "mediaworker run: <cause>; <fix>", naming
// the flag and its variable: the operator meeting them first is usually someone installing the worker,
// and a JSON log record or a multi-line dump hides the one thing to change.

// failStart prints err as one line and returns the exit code.
func failStart(stderr io.Writer, code int, err error) int {
	fmt.Fprintf(stderr, "mediaworker run: %s\n", oneLine(startupMessage(err)))
	return code
}

// startupMessage says which setting to change for the errors start-up can meet.
func startupMessage(err error) string {
	var se *app.SettingError
	switch {
	case errors.As(err, &se) && se.Fix == "":
		return withFlags(fmt.Sprintf("%v (%s)", se.Err, se.Field))
	case errors.As(err, &se):
		return withFlags(fmt.Sprintf("%v (%s): %s", se.Err, se.Field, se.Fix))
	case errors.Is(err, nats.ErrAuthorization):
		return fmt.Sprintf("%v: NATS refused the credentials; check --nats-creds (NATS_CREDS) or the server's accounts", err)
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Sprintf("%v: set --nats-url (NATS_URL) to a running NATS server, or leave it empty to run the embedded one", err)
	case strings.HasPrefix(err.Error(), "connecting to nats"):
		return fmt.Sprintf("%v: check --nats-url (NATS_URL) and --nats-creds (NATS_CREDS)", err)
	}
	return withFlags(err.Error())
}

// invalidSettings explains why cfg does not validate, naming the flags whose values cause it. The
// packages' Validate methods describe their config fields, not flags; blame is found by resetting each
// flag that was set (by flag or variable) to its default and seeing which errors go away.
func invalidSettings(c *command, args []string, bind func(*command, *app.Config) *settingsOf, verr error) string {
	return "invalid settings: " + strings.Join(invalidSettingsEach(c, args, bind, verr), "; ")
}

// invalidSettingsEach is invalidSettings' messages, one per mistake.
func invalidSettingsEach(c *command, args []string, bind func(*command, *app.Config) *settingsOf, verr error) []string {
	msgs := errorLines(verr)
	blamed := map[string][]string{}
	c.fs.Visit(func(f *flag.Flag) {
		probe := app.DefaultConfig()
		pc := newCommand(c.name, "", "")
		bind(pc, &probe)
		if _, err := pc.parse(args); err != nil && !errors.As(err, new(fileError)) {
			return // (a file with mistakes still sets its good values: config check tells both)
		}
		if err := pc.fs.Set(f.Name, f.DefValue); err != nil {
			return
		}
		probe.Scanner.MaxStreamBytes = probe.Pipeline.MaxInputBytes // as run does
		still := map[string]bool{}
		for _, m := range errorLines(probe.Validate()) {
			still[m] = true
		}
		for _, m := range msgs {
			if !still[m] {
				blamed[m] = append(blamed[m], f.Name)
			}
		}
	})
	parts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		var names []string
		for _, n := range blamed[m] {
			names = append(names, c.describe(n))
		}
		m = withFlags(m)
		if len(names) > 0 {
			m = fmt.Sprintf("%s: %s", strings.Join(names, ", "), m)
		}
		parts = append(parts, m)
	}
	return parts
}

// describe names a setting as the person set it: the config file's position and key, or the flag with
// the variable that set it (or would).
func (c *command) describe(name string) string {
	s := c.source[name]
	if c.file != nil && strings.HasPrefix(s, c.file.path+":") {
		if p := c.pos[name]; p != "" {
			s = p // file:line:col of the value
		}
		return fmt.Sprintf("%s: %s (--%s)", s, fileKeyOf(name), name)
	}
	src := envName(name)
	if s != "" && s != "flag" {
		src = s
	}
	return fmt.Sprintf("--%s (%s)", name, src)
}

// errorLines flattens a joined error into its messages.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// bindRunSettings binds what `run` reads: cfg, and run's own settings, which it returns.
func bindRunSettings(c *command, cfg *app.Config) *settingsOf {
	s := defaultSettings(cfg)
	c.bind(s, func(setting) bool { return true })
	c.bindConfig()
	return s
}

// applyRecipes puts the config file's recipes into cfg, or prints what is wrong with them.
func applyRecipes(c *command, cfg *app.Config, stderr io.Writer) bool {
	if c.file == nil {
		return true
	}
	recipes, errs := c.file.decodeRecipes()
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintf(stderr, "mediaworker %s: %v\n", c.name, e)
		}
		return false
	}
	cfg.Pipeline.Recipes = recipes
	return applyWebhooks(c, cfg, stderr)
}
