package jetstream

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// EmbeddedConfig configures the in-process JetStream server used when no NATS URL is given.
type EmbeddedConfig struct {
	Listen  string // host:port for clients, e.g. 127.0.0.1:4222 (so the nats CLI can connect)
	DataDir string // JetStream store lives in DataDir/jetstream
	// SyncInterval is how often the server fsyncs the JetStream store when SyncAlways is off (0: the
	// server's default of 2 min). What was acknowledged since the last fsync is lost on power loss.
	SyncInterval time.Duration
	// SyncAlways fsyncs every write: nothing acknowledged is lost on power loss (see docs/operations.md).
	// It is about power cuts only. A killed process (SIGKILL, the OOM killer) loses nothing the server
	// wrote, synced or not: it is in the page cache. And no sync setting orders a consumer's state
	// against its stream: nats-server writes a stream's messages and removals in place as they happen,
	// a consumer's delivered/ack state at most every 100 ms (filestore.go flushLoop), so after a crash
	// the consumer can lag its stream either way; rescue.go has the details and what the worker does
	// about a message left stranded. Measured with BenchmarkEmbeddedJobRound (sync_bench_test.go): on
	// this project's 2-core VM SyncAlways costs about 2 ms of JetStream writes per job (8–9× the
	// default's 0.25 ms), against image jobs of a tenth of a second and more and videos of seconds: it
	// stays on.
	SyncAlways bool

	// Auth is the credential the server accepts when ServerConfig is empty: its token, its user and
	// password, or the public key of its nkey seed. The worker's own connection presents it too.
	Auth ClientAuth
	// ServerConfig is a nats-server configuration file for anything richer: accounts, users and their
	// permissions (deploy/nats/accounts.conf), an operator and resolver for decentralised auth. Its
	// listen address, JetStream store and sync settings are overridden by the fields above.
	ServerConfig string
	// TLSCert and TLSKey make the server require TLS from network clients (the worker's own in-process
	// connection needs none).
	TLSCert, TLSKey string
}

// Validate checks the settings, and that a server reachable from the network authenticates its
// clients: it refuses to listen beyond loopback for anonymous clients, as the scan API refuses to
// without its token. It binds nothing.
func (c EmbeddedConfig) Validate() error {
	_, err := c.serverOptions()
	return err
}

// serverOptions turns the settings into nats-server options, checking them on the way.
func (c EmbeddedConfig) serverOptions() (*server.Options, error) {
	host, portStr, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address (EmbeddedConfig.Listen) %q: %w", c.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("listen address (EmbeddedConfig.Listen) %q: port %q is not a number", c.Listen, portStr)
	}
	if c.DataDir == "" {
		return nil, errors.New("data dir (EmbeddedConfig.DataDir) is empty")
	}
	if c.SyncInterval < 0 {
		return nil, fmt.Errorf("sync interval (EmbeddedConfig.SyncInterval) %s must not be negative", c.SyncInterval)
	}
	if err := c.Auth.Validate(); err != nil {
		return nil, err
	}
	opts := &server.Options{}
	if c.ServerConfig != "" {
		if opts, err = server.ProcessConfigFile(c.ServerConfig); err != nil {
			return nil, fmt.Errorf("reading the server config file (EmbeddedConfig.ServerConfig): %w", err)
		}
	} else if err := c.acceptAuth(opts); err != nil {
		return nil, err
	}
	opts.ServerName = "mediaworker"
	if port == 0 {
		// Port 0 means "any free port", as for every Go listener; nats-server reads 0 as its default
		// 4222 (and -1 as random), so two workers on ":0" would fight over 4222.
		port = server.RANDOM_PORT
	}
	opts.Host, opts.Port = host, port
	opts.JetStream = true
	opts.StoreDir = filepath.Join(c.DataDir, "jetstream")
	opts.NoSigs = true // main owns signals
	opts.SyncInterval, opts.SyncAlways = c.SyncInterval, c.SyncAlways
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("the TLS certificate and key (EmbeddedConfig.TLSCert, EmbeddedConfig.TLSKey) go together")
	}
	if c.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCert, KeyFile: c.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("loading the TLS certificate and key (EmbeddedConfig.TLSCert, EmbeddedConfig.TLSKey): %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, false
	}
	if !loopbackHost(host) && !authenticates(opts) {
		return nil, fmt.Errorf("the embedded NATS server would let anonymous clients in on %s: give it a credential (ClientAuth.Token, ClientAuth.User with ClientAuth.Password, or ClientAuth.NKey), or a server config file (EmbeddedConfig.ServerConfig) with users or an operator (and no no_auth_user), or listen on 127.0.0.1", c.Listen)
	}
	return opts, nil
}

// acceptAuth makes the server accept exactly the worker's own credential.
func (c EmbeddedConfig) acceptAuth(opts *server.Options) error {
	switch c.Auth.Method() {
	case "creds":
		return errors.New("a credentials file (ClientAuth.Creds) needs an operator the embedded server trusts: give it a server config file (EmbeddedConfig.ServerConfig) with operator and resolver, or use a user and password (ClientAuth.User, ClientAuth.Password), a token (ClientAuth.Token) or an nkey (ClientAuth.NKey)")
	case "nkey":
		pub, err := nkeyPublic(c.Auth.NKey)
		if err != nil {
			return err
		}
		opts.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	case "user":
		opts.Users = []*server.User{{Username: c.Auth.User, Password: c.Auth.Password}}
	case "token":
		opts.Authorization = c.Auth.Token
	}
	return nil
}

// authenticates reports whether the server refuses clients that present no credentials.
func authenticates(o *server.Options) bool {
	if o.NoAuthUser != "" {
		return false // anonymous clients are let in as that user
	}
	return o.Authorization != "" || o.Username != "" || len(o.Users) > 0 || len(o.Nkeys) > 0 ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.AuthCallout != nil
}

// loopbackHost reports whether a listen host only accepts connections from this machine.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// StartEmbedded starts a JetStream server in this process and waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig, log zerolog.Logger) (*server.Server, error) {
	opts, err := cfg.serverOptions()
	if err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("creating embedded nats server: %w", err)
	}
	fatal := make(chan string, 1)
	s.SetLoggerV2(serverLogger{l: log.With().Str("component", "nats-server").Logger(), fatal: fatal}, false, false, false)
	// Start returns once the server listens, or early after a fatal error (it then never listens):
	// report that error at once instead of waiting for a listener that will not come.
	started := make(chan struct{})
	go func() { defer close(started); s.Start() }()
	select {
	case <-started:
	case <-time.After(15 * time.Second):
	}
	select {
	case msg := <-fatal:
		s.Shutdown()
		if strings.Contains(msg, "system account") {
			msg += " (an operator in the server config file (EmbeddedConfig.ServerConfig) needs a system_account, with that account's JWT in the resolver)"
		}
		return nil, fmt.Errorf("starting the embedded nats server: %s", msg)
	default:
	}
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats server did not start listening on %s within 15s (is the port in use? see EmbeddedConfig.Listen)", cfg.Listen)
	}
	return s, nil
}

// serverLogger adapts zerolog to the nats-server Logger interface; the server's notices are chatty, so
// they go to debug.
type serverLogger struct {
	l     zerolog.Logger
	fatal chan<- string // receives the first fatal error, which stops the server from starting
}

func (s serverLogger) Noticef(format string, v ...any) { s.l.Debug().Msgf(format, v...) }
func (s serverLogger) Warnf(format string, v ...any)   { s.l.Warn().Msgf(format, v...) }
func (s serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	s.l.Error().Msg(msg)
	select {
	case s.fatal <- msg:
	default:
	}
}
func (s serverLogger) Errorf(format string, v ...any) { s.l.Error().Msgf(format, v...) }
func (s serverLogger) Debugf(format string, v ...any) { s.l.Trace().Msgf(format, v...) }
func (s serverLogger) Tracef(format string, v ...any) { s.l.Trace().Msgf(format, v...) }
