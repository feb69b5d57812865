package jetstream

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ConnectConfig says how to reach NATS: the worker (`run`) and the CLI commands (`submit`, `dlq`,
// `streams`) connect through Connect with it, so credentials, names and errors are the same for all.
type ConnectConfig struct {
	// URL is the server list; empty means the embedded server if there is one, else nats.DefaultURL.
	URL string
	// Name is the client name servers show (`nats server report connections`).
	Name string
	// Auth is the credential. With Embedded it is offered in-process (the server still checks it).
	Auth ClientAuth
	// Embedded, when set, is this process's own server: the connection is in-process (no socket, no
	// TLS, no reconnect storms).
	Embedded *server.Server
	// Reconnect keeps reconnecting for ever, logging each disconnect and reconnect to Log: what a
	// long-running worker wants. Commands that run once fail instead.
	Reconnect bool
	Log       zerolog.Logger
	// Denied, when set, hears each permissions violation the server reports on this connection. NATS
	// answers a request the user may not make with no reply at all (the violation comes apart, as an
	// asynchronous error), so a command that runs once stops on it instead of waiting out its timeout.
	Denied func(error)
}

// Connect opens a NATS connection and its JetStream context. A refused credential's error says which
// settings carry credentials.
func Connect(c ConnectConfig) (*nats.Conn, jetstream.JetStream, error) {
	url := c.URL
	opts := []nats.Option{nats.Name(c.Name)}
	if c.Reconnect {
		log := c.Log
		opts = append(opts,
			nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				log.Warn().Err(err).Msg("disconnected from nats")
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("reconnected to nats")
			}))
	}
	if c.Denied != nil {
		denied := c.Denied
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				denied(err)
			}
		}))
	}
	var (
		auth []nats.Option
		err  error
	)
	switch {
	case c.Embedded != nil:
		url = c.Embedded.ClientURL()
		if auth, err = c.Auth.CredentialOptions(); err == nil {
			auth = append(auth, nats.InProcessServer(c.Embedded))
		}
	default:
		if url == "" {
			url = nats.DefaultURL
		}
		auth, err = c.Auth.Options()
	}
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(url, append(opts, auth...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to nats at %s: %w%s", RedactURLs(url), err, AuthHint(err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("opening jetstream: %w", err)
	}
	return nc, js, nil
}

// RedactURLs masks the passwords in a comma-separated NATS server list (nats://user:pass@host), for
// errors, logs and `mediaworker config`.
func RedactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
