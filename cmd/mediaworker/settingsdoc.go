package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/mediaworker/mediaworker/app"
)

// settingsMarkdown is docs/operations.md's reference of the config file: every section and key with
// its flag, variable, type, default and meaning, from the same table --help prints, then a recipe's
// fields. settingsdoc_test.go keeps the page equal to it.
func settingsMarkdown() string {
	cfg := app.DefaultConfig()
	c := newCommand("run", "", "")
	bindRunSettings(c, &cfg)
	var b strings.Builder
	for _, s := range sections {
		fmt.Fprintf(&b, "\n### `%s:` — %s\n\n", s.name, s.title)
		b.WriteString("| key | flag | environment | type | default | meaning |\n| --- | --- | --- | --- | --- | --- |\n")
		for _, k := range s.keys() {
			f := c.fs.Lookup(k.flag)
			if f == nil {
				continue
			}
			env := "`" + envName(f.Name) + "`"
			for _, fb := range c.fallbacks[f.Name] {
				env += ", `" + fb + "`"
			}
			typ, usage := flag.UnquoteUsage(f)
			switch typ {
			case "":
				typ = "bool"
			case "value":
				typ = "size"
			}
			fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s | %s | %s |\n", k.key, f.Name, env, typ, docDefault(f), escapeCell(usage))
		}
	}
	fmt.Fprintf(&b, "\n### `%s:` — output sets requests name with `\"recipe\"`\n\n", recipesSection)
	b.WriteString("Each recipe is `<name>: {images: [variant, …], video: default}`; a variant's keys:\n\n| key | meaning |\n| --- | --- |\n")
	for _, k := range variantKeys {
		fmt.Fprintf(&b, "| `%s` | %s |\n", k, variantDocs[k])
	}
	b.WriteString("\nA recipe's `video:` is `default` (the MP4 and the poster, which every recipe makes) or a mapping that adds:\n\n| key | meaning |\n| --- | --- |\n")
	for _, k := range []string{"mp4", "hls", "hls.rungs", "hls.segment_seconds", "storyboard"} {
		fmt.Fprintf(&b, "| `%s` | %s |\n", k, videoDocs[k])
	}
	b.WriteString("\nA recipe's `documents:` " + documentsDoc + "\n")
	return b.String()
}

// docDefault is a flag's default as the docs show it: the machine-dependent ones as their rule.
func docDefault(f *flag.Flag) string {
	if st, _ := lookupSetting(f.Name); st.docDefault != "" {
		return st.docDefault
	}
	if f.DefValue == "" || f.DefValue == "0" || f.DefValue == "0s" || f.DefValue == "false" {
		if f.DefValue == "false" {
			return "`false`"
		}
		return ""
	}
	return "`" + f.DefValue + "`"
}

func escapeCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "<", "&lt;")
	return strings.ReplaceAll(s, ">", "&gt;")
}
