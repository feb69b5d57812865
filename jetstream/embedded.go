package jetstream

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// EmbeddedConfig configures the in-process JetStream server used when no NATS URL is given.
type EmbeddedConfig struct {
	Listen       string        // host:port for clients, e.g. 127.0.0.1:4222 (so the nats CLI can connect)
	DataDir      string        // JetStream store lives in DataDir/jetstream
	SyncInterval time.Duration // 0: the server default (2 min); see the docs on power loss
	SyncAlways   bool          // fsync every write: safest on a single edge server, slower
}

// Validate checks the settings.
func (c EmbeddedConfig) Validate() error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("nats listen address %q: %w", c.Listen, err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("nats listen port %q is not a number", port)
	}
	_ = host
	if c.DataDir == "" {
		return fmt.Errorf("data dir is empty")
	}
	return nil
}

// StartEmbedded starts a JetStream server in this process and waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig, log zerolog.Logger) (*server.Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, portStr, _ := net.SplitHostPort(cfg.Listen)
	port, _ := strconv.Atoi(portStr)
	opts := &server.Options{
		ServerName:   "mediaworker",
		Host:         host,
		Port:         port,
		JetStream:    true,
		StoreDir:     filepath.Join(cfg.DataDir, "jetstream"),
		NoSigs:       true, // main owns signals
		SyncInterval: cfg.SyncInterval,
		SyncAlways:   cfg.SyncAlways,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("creating embedded nats server: %w", err)
	}
	s.SetLoggerV2(serverLogger{log.With().Str("component", "nats-server").Logger()}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats server did not start listening on %s within 15s (is the port in use?)", cfg.Listen)
	}
	return s, nil
}

// serverLogger adapts zerolog to the nats-server Logger interface; the server's notices are chatty, so
// they go to debug.
type serverLogger struct{ l zerolog.Logger }

func (s serverLogger) Noticef(format string, v ...any) { s.l.Debug().Msgf(format, v...) }
func (s serverLogger) Warnf(format string, v ...any)   { s.l.Warn().Msgf(format, v...) }
func (s serverLogger) Fatalf(format string, v ...any)  { s.l.Error().Msgf(format, v...) }
func (s serverLogger) Errorf(format string, v ...any)  { s.l.Error().Msgf(format, v...) }
func (s serverLogger) Debugf(format string, v ...any)  { s.l.Trace().Msgf(format, v...) }
func (s serverLogger) Tracef(format string, v ...any)  { s.l.Trace().Msgf(format, v...) }
