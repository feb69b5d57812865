package main

import (
	"flag"
	"testing"

	"github.com/mediaworker/mediaworker/app"
)

// Issue 32 item 5: each setting is declared once (settings.go), and every command that has it shows
// that one declaration: the same name, help, variable and file key in run, config and streams.
func TestEachSettingIsDeclaredOnce(t *testing.T) {
	flags, names := map[string]string{}, map[string]bool{}
	for _, sec := range sections {
		keys := map[string]bool{}
		for _, st := range sec.settings {
			if keys[st.key] {
				t.Errorf("%s.%s is declared twice", sec.name, st.key)
			}
			keys[st.key] = true
			for _, n := range append([]string{st.flag}, st.renamed...) {
				if names[n] {
					t.Errorf("--%s is declared twice", n)
				}
				names[n] = true
			}
			flags[st.flag] = st.help
		}
	}
	cfg := app.DefaultConfig()
	run := newCommand("run", "", "")
	bindRunSettings(run, &cfg)
	streams := newCommand("streams", "", "")
	bindCommon(streams, &cfg)
	streams.bind(&settingsOf{Config: &cfg}, func(st setting) bool { return st.scope == streamsToo })
	for _, c := range []*command{run, streams} {
		c.fs.VisitAll(func(f *flag.Flag) {
			if _, alias := c.aliases[f.Name]; alias || f.Name == configFlag {
				return
			}
			if help, ok := flags[f.Name]; !ok || help != f.Usage {
				t.Errorf("%s's --%s is not its declaration (%q)", c.name, f.Name, help)
			}
		})
	}
	if streams.fs.Lookup("video-max-ack-pending") == nil || streams.fs.Lookup("reuse-ttl") == nil || streams.fs.Lookup("max-memory") != nil {
		t.Error("streams binds other settings than those of the definitions it writes")
	}
}
