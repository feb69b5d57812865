package faults

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// Issue 24 items 5, 6 and 8 against the built binary, as a neighbour on the same host would try them:
// a page rebinding its name to 127.0.0.1 reaches no console, 400 one-byte ranges cost one read of the
// object, and token guesses are throttled without locking the owner out.
func TestNeighboursOverHTTP(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	w := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	id := c.submit(testenv.MakeJPEG(t, t.TempDir(), 1600, 1200), "u/photo.jpg")
	l.await([]string{id}, time.Minute)
	variant := l.one(id).Processed[0].URL
	hc := &http.Client{Timeout: 20 * time.Second}
	base := "http://" + w.httpAddr

	t.Run("rebinding", func(t *testing.T) {
		for host, want := range map[string]int{"attacker.example": http.StatusMisdirectedRequest, "localhost": http.StatusOK, w.httpAddr: http.StatusOK} {
			req, _ := http.NewRequest("GET", base+"/", nil)
			req.Host = host
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("console with Host %q: %d, want %d", host, resp.StatusCode, want)
			}
		}
	})

	t.Run("ranges", func(t *testing.T) {
		whole := get(t, hc, variant, "")
		if whole.code != http.StatusOK || len(whole.body) < 2000 {
			t.Fatalf("variant %s: %d, %d bytes", variant, whole.code, len(whole.body))
		}
		one := get(t, hc, variant, "bytes=100-199")
		if one.code != http.StatusPartialContent || !bytes.Equal(one.body, whole.body[100:200]) {
			t.Errorf("one range: %d, %d bytes (same as the object's: %v)", one.code, len(one.body), bytes.Equal(one.body, whole.body[100:200]))
		}
		var many []string
		for i := range 400 {
			many = append(many, fmt.Sprintf("%d-%d", i, i))
		}
		abuse := get(t, hc, variant, "bytes="+strings.Join(many, ","))
		if abuse.code != http.StatusOK || !bytes.Equal(abuse.body, whole.body) {
			t.Errorf("400 one-byte ranges: %d, %d bytes; want the whole object once (200)", abuse.code, len(abuse.body))
		}
	})
}

// TestTokenGuessesOverHTTP: with an operator token, 30 wrong guesses at /v1/scan from one address
// are throttled (429), and the right token from that same address still works at once.
func TestTokenGuessesOverHTTP(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	const token = "faults-operator-token-0123456789abcdef"
	w := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--scan-api-token", token}})
	hc := &http.Client{Timeout: 30 * time.Second}
	scan := func(tok string) int {
		req, _ := http.NewRequest("POST", "http://"+w.httpAddr+"/v1/scan", strings.NewReader("hello"))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	codes := map[int]int{}
	for i := range 15 {
		codes[scan(fmt.Sprintf("wrong-%d", i))]++
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusOK] != 0 {
		t.Errorf("15 wrong tokens: %v; want some 429 and no 200", codes)
	}
	if got := scan(token); got != http.StatusOK {
		t.Errorf("the right token after the guesses, from the same address: %d, want 200", got)
	}
}

type fetched struct {
	code int
	body []byte
}

func get(t *testing.T, hc *http.Client, url, ranges string) fetched {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if ranges != "" {
		req.Header.Set("Range", ranges)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fetched{resp.StatusCode, b}
}
