package main

import (
	"strings"

	"github.com/mediaworker/mediaworker/app"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/job"
)

// The lanes' settings come one set per registered kind (package job's registry), named after it: its
// slots --max-<kind>-jobs (lanes.<kind>_jobs), its consumer's --<kind>-ack-wait and
// --<kind>-max-ack-pending (lanes.<kind>_ack_wait, lanes.<kind>_max_ack_pending), declared once for
// every kind (laneSettings). A new kind has them without an entry here.

// slotsFlag is the flag of kind's slots.
func slotsFlag(k job.Kind) string { return "max-" + string(k) + "-jobs" }

// laneSettings are the lanes section: the served lanes, each kind's slots, each kind's consumer.
func laneSettings() []setting {
	out := []setting{{flag: "lanes", key: "serve", help: "lanes this instance serves: " + lanesHelp() + "; every instance also triages requests to the lanes",
		at: func(s *settingsOf) any { return &s.Lanes }}}
	for _, spec := range job.Specs() {
		k := spec.Kind
		out = append(out, setting{flag: slotsFlag(k), key: string(k) + "_jobs", help: "concurrent " + string(k) + " " + spec.Work,
			docDefault: spec.Lane.SlotsRule, at: func(s *settingsOf) any { return &laneConfig(s.Config, k).Slots }})
	}
	for _, k := range job.Kinds() {
		name := string(k)
		out = append(out,
			setting{flag: name + "-ack-wait", key: name + "_ack_wait", scope: streamsToo, help: "ack wait of the " + name + " lane's consumer (0: --ack-wait)",
				at: func(s *settingsOf) any { return &laneLimits(&s.Streams, k).AckWait }},
			setting{flag: name + "-max-ack-pending", key: name + "_max_ack_pending", scope: streamsToo, help: "max ack pending of the " + name + " lane's consumer, its jobs in flight or waiting to retry across all instances (0: --max-ack-pending)",
				at: func(s *settingsOf) any { return &laneLimits(&s.Streams, k).MaxAckPending }})
	}
	return out
}

// lanesHelp says what --lanes takes: "all, or a subset of image, video, document", and what all
// means for the kinds only recipes turn on.
func lanesHelp() string {
	names := make([]string, len(natsjs.Lanes))
	var optIn []string
	for i, l := range natsjs.Lanes {
		names[i] = string(l)
		if spec, _ := job.SpecOf(l); spec.OptIn {
			optIn = append(optIn, string(l))
		}
	}
	h := "all, or a comma-separated subset of " + strings.Join(names, ", ")
	if len(optIn) > 0 {
		h += " (all serves " + strings.Join(optIn, ", ") + " only when a recipe asks for it)"
	}
	return h
}

// laneConsumers names the lanes' consumer definitions of `streams print`, joined by sep and the last
// by last: "consumer-image | consumer-video".
func laneConsumers(sep, last string) string {
	var b strings.Builder
	for i, l := range natsjs.Lanes {
		switch {
		case i == 0:
		case i == len(natsjs.Lanes)-1:
			b.WriteString(last)
		default:
			b.WriteString(sep)
		}
		b.WriteString("consumer-" + string(l))
	}
	return b.String()
}

// laneConfig is cfg's settings of kind's lane, made when missing (a zero Config has none).
func laneConfig(cfg *app.Config, k job.Kind) *app.LaneConfig {
	if cfg.PerLane == nil {
		cfg.PerLane = map[job.Kind]*app.LaneConfig{}
	}
	if cfg.PerLane[k] == nil {
		cfg.PerLane[k] = &app.LaneConfig{}
	}
	return cfg.PerLane[k]
}

// laneLimits is sc's settings of kind's lane consumer, made when missing.
func laneLimits(sc *natsjs.Config, k job.Kind) *natsjs.LaneLimits {
	if sc.Lanes == nil {
		sc.Lanes = map[job.Kind]*natsjs.LaneLimits{}
	}
	if sc.Lanes[k] == nil {
		sc.Lanes[k] = &natsjs.LaneLimits{}
	}
	return sc.Lanes[k]
}
