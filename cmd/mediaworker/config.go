package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/mediaworker/mediaworker/app"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
)

func cmdConfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check" {
		return cmdConfigCheck(ctx, args[1:], stdout, stderr)
	}
	cfg := app.DefaultConfig()
	c := newCommand("config", "Print the settings `mediaworker run` would use with this config file, these flags and this\nenvironment, with where each value came from (default, file:line, flag, or the variable's name),\nand the recipes requests may name. Secrets are masked. Takes the same flags as run.\n\n`mediaworker config check FILE` validates a config file without starting anything.", "")
	bindRunSettings(c, &cfg)
	if _, code, ok := parseOrUsage(c, args, stdout, stderr); !ok {
		return code
	}
	if !applyRecipes(c, &cfg, stderr) {
		return exitUsage
	}
	printNotes(c, stderr)
	printSettings(c, cfg, stdout)
	for _, e := range cfg.Webhooks.Endpoints { // the file's webhooks.endpoints, secrets masked
		fmt.Fprintf(stdout, "webhook endpoint: %s\n", e)
	}
	cfg.Scanner.MaxStreamBytes = cfg.Pipeline.MaxInputBytes // as run does
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "\nthese settings would not start: %s\n", oneLine(invalidSettings(c, args, bindRunSettings, err)))
		return exitUsage
	}
	return exitOK
}

// cmdConfigCheck validates a config file as `run --config FILE` would read it, with the environment's
// variables but no flags, and starts nothing.
func cmdConfigCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	const summary = "Validate a config file as `mediaworker run --config FILE` reads it (with this environment's\nMW_* variables), without starting anything. Exit 0 when it is valid, 2 naming each mistake's\nline, column and key."
	first := newCommand("config check", summary, "FILE")
	first.argsOnly = true // MW_CONFIG names another file than the one to check
	bindRunSettings(first, new(app.Config))
	rest, code, ok := parseOrUsage(first, withoutConfig(args), stdout, stderr)
	if !ok {
		return code
	}
	if len(rest) != 1 {
		fmt.Fprintf(stderr, "mediaworker config check: name one config file, e.g. mediaworker config check /etc/mediaworker.yaml\n")
		return exitUsage
	}
	path := rest[0]
	// The file's own check: its settings beneath this environment, as run reads them. Every mistake is
	// told, at once: the file's (keys, types, recipes) and then what its values break together.
	cfg := app.DefaultConfig()
	c := newCommand("config check", summary, "FILE")
	bindRunSettings(c, &cfg)
	checkArgs := []string{"--" + configFlag, path}
	_, err := c.parse(checkArgs)
	var fe fileError
	if err != nil && (c.file == nil || !errors.As(err, &fe)) {
		fmt.Fprintf(stderr, "mediaworker config check: %s\n", oneLine(err.Error()))
		return exitUsage
	}
	mistakes := errorLines(err)
	if err == nil && !applyRecipes(c, &cfg, stderr) {
		return exitUsage // (the file's recipes were checked with it: not reached)
	}
	cfg.Scanner.MaxStreamBytes = cfg.Pipeline.MaxInputBytes
	if verr := cfg.Validate(); verr != nil {
		mistakes = append(mistakes, invalidSettingsEach(c, checkArgs, bindRunSettings, verr)...)
	}
	printNotes(c, stderr)
	if len(mistakes) > 0 {
		sortByPosition(mistakes, path)
		for _, m := range mistakes {
			fmt.Fprintf(stderr, "mediaworker config check: %s\n", oneLine(m))
		}
		return exitUsage
	}
	n := 0
	for _, s := range c.source {
		if strings.HasPrefix(s, path+":") {
			n++
		}
	}
	fmt.Fprintf(stdout, "%s: valid (%d settings; recipes: %s)\n", path, n, strings.Join(recipeNames(cfg.Pipeline.Recipes), ", "))
	return exitOK
}

// sortByPosition orders the messages that begin with path:line:col by it, in the file's order, the
// others after them.
func sortByPosition(msgs []string, path string) {
	at := func(m string) (int, int) {
		line, col := math.MaxInt, 0
		if rest, ok := strings.CutPrefix(m, path+":"); ok {
			fmt.Sscanf(rest, "%d:%d", &line, &col)
		}
		return line, col
	}
	sort.SliceStable(msgs, func(i, j int) bool {
		li, ci := at(msgs[i])
		lj, cj := at(msgs[j])
		return li < lj || li == lj && ci < cj
	})
}

// printNotes warns of the deprecated names and the empty variables the command met, and says which
// variables override the config file.
func printNotes(c *command, stderr io.Writer) {
	for _, d := range c.deprecated {
		fmt.Fprintf(stderr, "warning: %s\n", d)
	}
	for _, e := range c.emptyVars {
		fmt.Fprintf(stderr, "warning: %s\n", e)
	}
	for _, o := range c.overrides {
		fmt.Fprintf(stderr, "note: %s\n", o)
	}
}

// withoutConfig drops --config from args: `config check` names its file as its argument.
func withoutConfig(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if strings.HasPrefix(args[i], "-") && name == configFlag {
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// printSettings writes every setting with its file key, value and source, by section, then the
// recipes.
func printSettings(c *command, cfg app.Config, w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tFLAG\tVALUE\tFROM")
	row := func(key string, f *flag.Flag) {
		v := f.Value.String()
		if isSecret(f.Name) && v != "" {
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
		fmt.Fprintf(tw, "%s\t--%s\t%s\t%s\n", key, f.Name, v, from)
	}
	printed := map[string]bool{}
	for _, s := range sections {
		for _, k := range s.keys() {
			if f := c.fs.Lookup(k.flag); f != nil {
				row(s.name+"."+k.key, f)
				printed[k.flag] = true
			}
		}
	}
	var rest []*flag.Flag
	c.fs.VisitAll(func(f *flag.Flag) {
		if _, alias := c.aliases[f.Name]; !printed[f.Name] && !alias {
			rest = append(rest, f)
		}
	})
	sort.Slice(rest, func(i, j int) bool { return rest[i].Name < rest[j].Name })
	for _, f := range rest {
		row("-", f)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRECIPES")
	for _, name := range recipeNames(cfg.Pipeline.Recipes) {
		r, ok := cfg.Pipeline.Recipes[name]
		from := "built in"
		if ok && c.file != nil {
			from = c.file.path
		}
		fmt.Fprintf(w, "  %s (%s): %s\n", name, from, describeRecipe(r, cfg))
	}
}

// describeRecipe says in one line what a recipe makes.
func describeRecipe(r pipeline.Recipe, cfg app.Config) string {
	specs := r.Images
	if specs == nil {
		specs = cfg.Images.DefaultRecipe()
	}
	parts := make([]string, 0, len(specs))
	for _, v := range specs {
		parts = append(parts, fmt.Sprintf("%s %d×%d %s %s q%d", v.Name, v.Width, v.Height, orDefault(string(v.Fit), "inside"), orDefault(string(v.Format), "webp"), v.Quality))
	}
	video := pipeline.DefaultVideo
	if m := r.Video.MP4; m != nil {
		video += fmt.Sprintf(" + mp4 %v", m)
	}
	if h := r.Video.HLS; h != nil {
		var rungs []string
		for _, g := range h.Rungs {
			rungs = append(rungs, fmt.Sprintf("%dp≤%dkbps", g.Height, g.MaxKbps))
		}
		video += " + hls " + strings.Join(rungs, ",")
	}
	if r.Video.Storyboard != nil {
		video += " + storyboard"
	}
	out := "images: " + strings.Join(parts, ", ") + "; video: " + video
	if r.Documents {
		out += "; " + documentsDescribed
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
