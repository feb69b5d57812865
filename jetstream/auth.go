package jetstream

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ClientAuth is how a client proves who it is to NATS and checks the server, with the settings and
// variable names of the nats CLI (NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD, NATS_TOKEN, NATS_CA,
// NATS_CERT, NATS_KEY). `mediaworker run` (for its own connection, and as what its embedded server
// accepts), `submit`, `dlq` and `streams` all use one.
type ClientAuth struct {
	Creds    string // decentralised-auth credentials file (user JWT + nkey seed), as nsc writes it
	NKey     string // file holding a user nkey seed (SU...)
	User     string
	Password string
	Token    string

	CA   string // PEM file of CAs that sign the server's certificate (TLS)
	Cert string // client certificate (mutual TLS), with Key
	Key  string
}

// Method names the credential in use ("creds", "nkey", "user", "token"), or "" for none.
func (c ClientAuth) Method() string {
	switch {
	case c.Creds != "":
		return "creds"
	case c.NKey != "":
		return "nkey"
	case c.User != "":
		return "user"
	case c.Token != "":
		return "token"
	}
	return ""
}

// Validate checks that at most one credential is given, completely.
func (c ClientAuth) Validate() error {
	var set []string
	for _, s := range []struct{ name, v string }{
		{"ClientAuth.Creds", c.Creds}, {"ClientAuth.NKey", c.NKey}, {"ClientAuth.User", c.User}, {"ClientAuth.Token", c.Token},
	} {
		if s.v != "" {
			set = append(set, s.name)
		}
	}
	var errs []error
	if len(set) > 1 {
		errs = append(errs, fmt.Errorf("%s are alternatives: give one of them", strings.Join(set, " and ")))
	}
	if c.Password != "" && c.User == "" {
		errs = append(errs, errors.New("a password (ClientAuth.Password) needs a user (ClientAuth.User)"))
	}
	if c.User != "" && c.Password == "" {
		errs = append(errs, errors.New("a user (ClientAuth.User) needs a password (ClientAuth.Password)"))
	}
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, errors.New("the client certificate and key (ClientAuth.Cert, ClientAuth.Key) go together"))
	}
	for _, f := range []struct{ name, path string }{
		{"ClientAuth.Creds", c.Creds}, {"ClientAuth.NKey", c.NKey}, {"ClientAuth.CA", c.CA}, {"ClientAuth.Cert", c.Cert}, {"ClientAuth.Key", c.Key},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
		}
	}
	return errors.Join(errs...)
}

// CredentialOptions returns the nats.go options that present the credential.
func (c ClientAuth) CredentialOptions() ([]nats.Option, error) {
	switch c.Method() {
	case "creds":
		return []nats.Option{nats.UserCredentials(c.Creds)}, nil
	case "nkey":
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("reading the nkey seed (ClientAuth.NKey) %s: %w", c.NKey, err)
		}
		return []nats.Option{o}, nil
	case "user":
		return []nats.Option{nats.UserInfo(c.User, c.Password)}, nil
	case "token":
		return []nats.Option{nats.Token(c.Token)}, nil
	}
	return nil, nil
}

// Options returns the credential and TLS options for a connection over the network.
func (c ClientAuth) Options() ([]nats.Option, error) {
	opts, err := c.CredentialOptions()
	if err != nil {
		return nil, err
	}
	if c.CA != "" {
		opts = append(opts, nats.RootCAs(c.CA))
	}
	if c.Cert != "" {
		opts = append(opts, nats.ClientCert(c.Cert, c.Key))
	}
	return opts, nil
}

// nkeyPublic reads a user nkey seed file and returns its public key, which a server lists.
func nkeyPublic(seedFile string) (string, error) {
	b, err := os.ReadFile(seedFile)
	if err != nil {
		return "", fmt.Errorf("reading the nkey seed (ClientAuth.NKey): %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", fmt.Errorf("reading the nkey seed (ClientAuth.NKey) %s: %w", seedFile, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("reading the nkey seed (ClientAuth.NKey) %s: %w", seedFile, err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("the nkey seed (ClientAuth.NKey) %s holds a %c key, not a user seed (SU…)", seedFile, pub[0])
	}
	return pub, nil
}

// AuthHint is appended to connection errors that look like refused credentials.
func AuthHint(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization") {
		return " (the server refused the credentials: check the credential given, ClientAuth.Creds, ClientAuth.NKey, ClientAuth.User/ClientAuth.Password or ClientAuth.Token)"
	}
	return ""
}
