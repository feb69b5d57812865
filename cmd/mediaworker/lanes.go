package main

import (
	"strings"

	"github.com/mediaworker/mediaworker/app"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/job"
)

// The lanes' settings come one set per registered kind (package job's registry), named after it: its
// slots --max-<kind>-jobs (lanes.<kind>_jobs), its consumer's --<kind>-ack-wait and
// --<kind>-max-ack-pending (lanes.<kind>_ack_wait, lanes.<kind>_max_ack_pending). A new kind has
// them without an entry here.

// slotsFlag is the flag of kind's slots.
func slotsFlag(k job.Kind) string { return "max-" + string(k) + "-jobs" }

// laneKeys are the lanes section's keys: the served lanes, each kind's slots, each kind's consumer.
func laneKeys() []settingKey {
	keys := []settingKey{{"serve", "lanes"}}
	for _, k := range job.Kinds() {
		keys = append(keys, settingKey{string(k) + "_jobs", slotsFlag(k)})
	}
	for _, k := range job.Kinds() {
		keys = append(keys, settingKey{string(k) + "_ack_wait", string(k) + "-ack-wait"},
			settingKey{string(k) + "_max_ack_pending", string(k) + "-max-ack-pending"})
	}
	return keys
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

// bindSlots binds each kind's slots.
func bindSlots(c *command, cfg *app.Config) {
	for _, s := range job.Specs() {
		l := laneConfig(cfg, s.Kind)
		c.fs.IntVar(&l.Slots, slotsFlag(s.Kind), l.Slots, "concurrent "+string(s.Kind)+" "+s.Work)
	}
}

// lanesHelp says what --lanes takes: "image,video (all), image or video".
func lanesHelp() string {
	names := make([]string, len(natsjs.Lanes))
	for i, l := range natsjs.Lanes {
		names[i] = string(l)
	}
	return natsjs.AllLanes() + " (all), " + strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
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
