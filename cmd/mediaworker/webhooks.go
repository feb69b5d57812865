package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/webhooks"
)

// cmdWebhooks: `webhooks test URL` sends a signed sample; `webhooks secret` makes a secret;
// `webhooks enable NAME` resumes an endpoint disabled by a 410.
func cmdWebhooks(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.DefaultConfig()
	c := newCommand("webhooks", `Webhook endpoints (docs/webhooks.md).
  test URL        send one signed sample answer to URL, as a delivery would be sent, and print the result
  secret          print a new signing secret (whsec_…, 32 random bytes)
  public-key KEY  print the whpk_ public key receivers verify an Ed25519 key's (whsk_…) signatures with
  enable NAME     resume endpoint NAME after it answered 410 Gone (its kept deliveries are sent)`, "test URL | secret | public-key KEY | enable NAME")
	bindCommon(c, &cfg)
	var e webhooks.Endpoint
	c.fs.Var((*listFlag)(&e.Secrets), "secret", "with test: the signing secret(s), comma-separated (default: MW_WEBHOOK_SECRET)")
	c.fs.StringVar(&e.Ed25519Key, "ed25519-key", "", "with test: an Ed25519 key (whsk_…) to sign with too")
	c.fs.BoolVar(&e.AllowPrivate, "allow-private", false, "with test: allow a loopback or private-network URL")
	durationVar(c.fs, &e.Timeout, "timeout", "with test: how long to wait for the answer (0: 15s)")
	rest, code, ok := parseOrUsage(c, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(rest) == 0 {
		c.printUsage(stderr)
		return exitUsage
	}
	switch rest[0] {
	case "secret":
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		fmt.Fprintln(stdout, "whsec_"+base64.StdEncoding.EncodeToString(b))
		return exitOK
	case "public-key":
		if len(rest) != 2 {
			fmt.Fprintln(stderr, "mediaworker webhooks public-key: name one Ed25519 key (whsk_…)")
			return exitUsage
		}
		pk, err := webhooks.PublicKey(rest[1])
		if err != nil {
			fmt.Fprintf(stderr, "mediaworker webhooks public-key: the key %v\n", err)
			return exitUsage
		}
		fmt.Fprintln(stdout, pk)
		return exitOK
	case "test":
		if len(rest) != 2 {
			fmt.Fprintln(stderr, "mediaworker webhooks test: name one URL, e.g. mediaworker webhooks test --secret whsec_… https://api.example/hooks")
			return exitUsage
		}
		if len(e.Secrets) == 0 {
			if v := os.Getenv(envName("webhook-secret")); v != "" {
				_ = (*listFlag)(&e.Secrets).Set(v)
			}
		}
		e.Name, e.URL = "test", rest[1]
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		res := webhooks.SendTest(ctx, e, []byte(webhooks.SampleBody))
		if res.Err != nil {
			fmt.Fprintf(stderr, "mediaworker webhooks test: %s: %v\n", webhooks.Redact(e.URL), res.Err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "delivered: HTTP %d, webhook-id %s\n", res.Status, res.ID)
		return exitOK
	case "enable":
		if len(rest) != 2 {
			fmt.Fprintln(stderr, "mediaworker webhooks enable: name one endpoint, e.g. mediaworker webhooks enable api")
			return exitUsage
		}
		if err := cfg.Streams.Validate(); err != nil {
			fmt.Fprintf(stderr, "mediaworker webhooks enable: %v\n", err)
			return exitUsage
		}
		ctx, stop, js, err := connectJS(ctx, cfg, "mediaworker webhooks", stderr)
		if err != nil {
			fmt.Fprintf(stderr, "mediaworker webhooks enable: %v\n", err)
			return exitFailure
		}
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := webhooks.Enable(ctx, js, webhooks.Streams{App: cfg.Streams.App, Responses: cfg.Streams.ResponsesStream()}, rest[1]); err != nil {
			fmt.Fprintf(stderr, "mediaworker webhooks enable: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "endpoint %s enabled\n", rest[1])
		return exitOK
	}
	fmt.Fprintf(stderr, "mediaworker webhooks: unknown action %q\n", rest[0])
	c.printUsage(stderr)
	return exitUsage
}
