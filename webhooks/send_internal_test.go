package webhooks

import (
	"net/http"
	"testing"
	"time"
)

// Retry-After in both forms; nonsense (negative, a date past, garbage) is no Retry-After, and a huge
// number of seconds is a day, not the fraction of a second its overflow would make.
func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"120", 2 * time.Minute},
		{"0", 0},
		{"-5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"18446744074", maxRetryAfter},         // × 1e9 ns wraps to 0.29 s in an int64
		{"99999999999999999999999", 0},         // not an int64 at all
		{"9223372036854775807", maxRetryAfter}, // the largest int64
		{"86401", maxRetryAfter},
	} {
		if got := retryAfter(tc.v, now); got != tc.want {
			t.Errorf("Retry-After %q: %s, want %s", tc.v, got, tc.want)
		}
	}
}
