package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// command is one subcommand: its flag set, its one-line summary, and what it does.
type command struct {
	name    string
	summary string
	usage   string // argument synopsis after the flags, e.g. "FILE..."
	fs      *flag.FlagSet
	// fallbacks maps a flag to standard environment variables read when MW_<FLAG> is unset.
	fallbacks map[string][]string
	// source says where each set flag's value came from: the variable's name, "flag", or the config
	// file's path and line.
	source map[string]string
	// aliases maps the deprecated names of renamed flags (a setting's renamed) to today's.
	aliases map[string]string
	// deprecated lists, once each, the deprecated names this invocation used, for a warning.
	deprecated []string
	// file is the config file read by parse, nil when none was named.
	file *configFile
	// argsOnly makes parse read no config file and no variables: config check's first look at its
	// arguments, which the second look reads with both (a bad variable told there beside the file's
	// mistakes, not alone here in their stead).
	argsOnly bool
	// emptyVars and overrides say, once each, what the environment did that an operator should hear
	// of: an empty variable ignored, a variable overriding the config file. Never a value: it may be a
	// secret.
	emptyVars, overrides []string
	// pos is where in the config file each flag's value is, file:line:col, for errors.
	pos map[string]string
}

// note adds s to list once.
func note(list *[]string, s string) {
	if !slices.Contains(*list, s) {
		*list = append(*list, s)
	}
}

func newCommand(name, summary, usage string) *command {
	c := &command{name: name, summary: summary, usage: usage, fs: flag.NewFlagSet(name, flag.ContinueOnError),
		fallbacks: map[string][]string{}, source: map[string]string{}, aliases: map[string]string{}, pos: map[string]string{}}
	c.fs.SetOutput(io.Discard) // we print usage and errors ourselves
	return c
}

// envName is the environment variable of a flag: --clamd-addr ↔ MW_CLAMD_ADDR.
func envName(flagName string) string {
	return "MW_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// bindConfig registers --config.
func (c *command) bindConfig() {
	c.fs.String(configFlag, "", "YAML config file holding any of these settings in sections, and the recipes (see docs/operations.md); variables and flags override it")
}

// parse applies the config file first, then environment variables, then the command line, so a
// variable beats the file and a flag beats both. It returns the positional arguments.
func (c *command) parse(args []string) ([]string, error) {
	var errs []error
	if path, src := configPathOf(args); path != "" && !c.argsOnly && c.fs.Lookup(configFlag) != nil {
		f, err := c.loadConfigFile(path)
		if f == nil {
			return nil, err
		}
		// The file's mistakes are told with the variables', all at once.
		errs = append(errs, err)
		c.file = f
		c.source[configFlag] = src
	}
	defer c.noteDeprecated()
	c.fs.VisitAll(func(f *flag.Flag) {
		if c.argsOnly {
			return
		}
		names := append([]string{envName(f.Name)}, c.fallbacks[f.Name]...)
		for _, n := range names {
			v, ok := os.LookupEnv(n)
			if !ok {
				continue
			}
			if v == "" {
				// An empty variable is not a setting: it is what a template's unset ${KEY} leaves, and
				// taken as one it would clear the file's signing key or NATS URL without a word.
				note(&c.emptyVars, fmt.Sprintf("%s is set but empty: ignored, as if unset (to clear --%s, pass --%s= or remove it from the config file)", n, f.Name, f.Name))
				continue
			}
			if err := c.set(f.Name, v); err != nil {
				// Refused: it set nothing, so it overrides nothing (the file's value stands, and is told
				// as the file's).
				errs = append(errs, fmt.Errorf("environment variable %s=%q (--%s): %s", n, v, f.Name, valueProblem(f, err)))
				break
			}
			if from := c.source[f.Name]; c.file != nil && strings.HasPrefix(from, c.file.path+":") {
				note(&c.overrides, fmt.Sprintf("%s overrides %s (%s) of the config file %s", n, fileKeyOf(f.Name), "--"+f.Name, from))
			}
			c.source[f.Name] = n
			break
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Flags may come before, between or after the positional arguments (`dlq replay --all`); "--"
	// ends the flags.
	var positional []string
	given := args // the loop below consumes args
	defer c.fs.Visit(func(f *flag.Flag) {
		if _, earlier := c.source[f.Name]; !earlier || contains(given, f.Name) {
			c.source[f.Name] = "flag"
		}
	})
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, err
		}
		args = c.fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// noteDeprecated records the deprecated names used, and credits their values to today's names.
func (c *command) noteDeprecated() {
	c.fs.Visit(func(f *flag.Flag) {
		now, ok := c.aliases[f.Name]
		if !ok {
			return
		}
		src := c.source[f.Name]
		if src == "" || src == "flag" {
			src = "--" + f.Name
		}
		c.source[now] = src + " (deprecated name)"
		c.deprecated = append(c.deprecated, fmt.Sprintf("%s is deprecated: use --%s (%s, %s in the config file)", src, now, envName(now), fileKeyOf(now)))
	})
}

// printUsage writes the command's help: synopsis, summary, and every flag with its variable, default and
// config file key, grouped by the config file's sections.
func (c *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: mediaworker %s [flags] %s\n\n%s\n", c.name, c.usage, c.summary)
	printed := map[string]bool{}
	grouped := false
	for _, s := range sections {
		var keys []settingKey
		for _, k := range s.keys() {
			if c.fs.Lookup(k.flag) != nil {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			continue
		}
		if !grouped {
			fmt.Fprintln(w, "\nEach flag is also read from the environment variable shown, and from the config file\n(--config) under the key shown; a flag beats its variable, which beats the file. An empty\nvariable is ignored, as if unset.")
			grouped = true
		}
		fmt.Fprintf(w, "\n%s (config file section %q):\n", strings.ToUpper(s.title[:1])+s.title[1:], s.name)
		for _, k := range keys {
			c.printFlag(w, c.fs.Lookup(k.flag), s.name+"."+k.key)
			printed[k.flag] = true
		}
	}
	var rest []*flag.Flag
	c.fs.VisitAll(func(f *flag.Flag) {
		if _, alias := c.aliases[f.Name]; !printed[f.Name] && !alias {
			rest = append(rest, f)
		}
	})
	sort.Slice(rest, func(i, j int) bool { return rest[i].Name < rest[j].Name })
	if len(rest) > 0 {
		if grouped {
			fmt.Fprintln(w, "\nOther flags:")
		} else {
			fmt.Fprintln(w, "\nFlags (each also read from the environment variable shown):")
		}
		for _, f := range rest {
			c.printFlag(w, f, "")
		}
	}
	if len(c.aliases) > 0 {
		olds := make([]string, 0, len(c.aliases))
		for old := range c.aliases {
			olds = append(olds, old)
		}
		sort.Strings(olds)
		fmt.Fprintln(w, "\nDeprecated names, still accepted with a warning:")
		for _, old := range olds {
			fmt.Fprintf(w, "  --%s → --%s\n", old, c.aliases[old])
		}
	}
}

// printFlag writes one flag's entry of the help.
func (c *command) printFlag(w io.Writer, f *flag.Flag, fileKey string) {
	name, usage := flag.UnquoteUsage(f)
	head := "  --" + f.Name
	if name != "" {
		head += " " + name
	}
	env := envName(f.Name)
	if fb := c.fallbacks[f.Name]; len(fb) > 0 {
		env += ", " + strings.Join(fb, ", ")
	}
	if fileKey != "" {
		env += "] [" + fileKey
	}
	def := ""
	if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
		def = fmt.Sprintf(" (default %s)", f.DefValue)
	}
	fmt.Fprintf(w, "%s\n      %s%s\n      [%s]\n", head, usage, def, env)
}

// bytesFlag is a byte count that accepts units: 500MiB, 1G, 1048576.
type bytesFlag struct{ p *int64 }

// String prints the exact value in the largest binary unit that divides it (500MiB, not 524.3 MB), so
// what --help shows can be pasted back.
func (b bytesFlag) String() string {
	if b.p == nil {
		return ""
	}
	n := *b.p
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b bytesFlag) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			s, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("%q is not a byte size (examples: 500MiB, 2G, 1048576)", s)
	}
	return int64(f * float64(mult)), nil
}

// set sets a flag from the config file or a variable. A value it refuses leaves the flag as it was:
// the flag package's numbers, bools and durations are zeroed by a failed Set, and config check, which
// goes on to tell what the values break together, would also tell what that zero breaks ("scan
// timeout must be positive, got 0s" beside "clamd.scan_timeout: not a duration").
func (c *command) set(name, v string) error {
	fl := c.fs.Lookup(name)
	if fl == nil {
		return c.fs.Set(name, v) // its own "no such flag"
	}
	was := fl.Value.String() // every value's String is its Set's text (secrets are plain strings)
	err := c.fs.Set(name, v)
	if err != nil {
		_ = fl.Value.Set(was)
	}
	return err
}

func durationVar(fs *flag.FlagSet, p *time.Duration, name string, usage string) {
	fs.DurationVar(p, name, *p, usage)
}

// contains reports whether args name the flag (as -name, --name, -name=v or --name=v).
func contains(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// valueProblem says what is wrong with a value in words a person can act on; the flag package's own
// word for a bad number or duration is "parse error".
func valueProblem(f *flag.Flag, err error) string {
	if !strings.Contains(err.Error(), "parse error") {
		return err.Error()
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	switch g.Get().(type) {
	case time.Duration:
		return "not a duration (examples: 90s, 5m, 1h30m)"
	case bool:
		return "not a boolean (true or false)"
	case int, int64, uint, uint64:
		return "not a whole number"
	case float64:
		return "not a number"
	}
	return err.Error()
}
