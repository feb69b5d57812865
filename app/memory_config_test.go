package app

import (
	"strings"
	"testing"
)

// The memory budget's setting: the default is valid, 0 turns it off, and a budget too small to hold
// one image's variant is refused naming the field (cmd/mediaworker tells it as --max-memory).
func TestMaxMemoryIsValidated(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.MaxMemory != DefaultMaxMemory {
		t.Fatalf("default MaxMemory %d, want %d", cfg.MaxMemory, DefaultMaxMemory)
	}
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "MaxMemory") {
		t.Fatalf("the default budget is refused: %v", err)
	}
	cfg.MaxMemory = 0
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "MaxMemory") {
		t.Fatalf("0 (no budget) is refused: %v", err)
	}
	cfg.MaxMemory = 16 << 20
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "max memory (MaxMemory) 16777216 bytes (16.0 MiB) is below the least budget, 32 MiB") {
		t.Fatalf("a 16 MiB budget: %v, want a refusal naming MaxMemory and the least budget", err)
	}
}
