package webhooks

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// The guard keeps deliveries off the worker's own networks (SSRF): an endpoint URL comes from the
// config, but the name in it resolves wherever its DNS says, and may say something else at the next
// lookup. So the address is checked where it is used, in the dialer's Control function, after
// resolution and before the connect: a name that resolves to loopback is refused at that moment,
// whatever it resolved to before (no DNS rebinding). Redirects are not followed at all.

// ErrRefusedAddress says an endpoint resolved to an address the guard refuses.
var ErrRefusedAddress = errors.New("refused address")

// refusedPrefixes are the ranges a delivery may not reach without AllowPrivate, with why.
var refusedPrefixes = []struct {
	p   netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (0.0.0.0/8)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918, 10/8)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (100.64/10)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254/16, cloud metadata lives here)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918, 172.16/12)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (192.0.0/24)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918, 192.168/16)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (198.18/15)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (240/4)"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (IPv6 ULA, fc00::/7)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local (fe80::/10)"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (fec0::/10)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("100::/64"), "discard-only (100::/64)"},
}

// refused says why the guard refuses ip, "" when it may be reached. An IPv6 address that embeds an
// IPv4 one (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4
// 2002::/16) is judged by the IPv4 address it reaches; Teredo (2001::/32) tunnels to an address that
// cannot be checked, so it is refused.
func refused(ip netip.Addr) string {
	ip = ip.WithZone("")
	if v4, ok := embeddedV4(ip); ok {
		if why := refused(v4); why != "" {
			return fmt.Sprintf("%s embeds %s, which is %s", ip, v4, why)
		}
		return ""
	}
	if ip.Is6() && netip.MustParsePrefix("2001::/32").Contains(ip) {
		return fmt.Sprintf("%s is a Teredo tunnel address", ip)
	}
	for _, r := range refusedPrefixes {
		if r.p.Contains(ip) {
			return fmt.Sprintf("%s is %s", ip, r.why)
		}
	}
	return ""
}

// embeddedV4 returns the IPv4 address an IPv6 address carries, if it is of a form that reaches one.
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	if ip.Is4() {
		return netip.Addr{}, false
	}
	if ip.Is4In6() {
		return ip.Unmap(), true
	}
	b := ip.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]}) }
	switch {
	case netip.MustParsePrefix("64:ff9b::/96").Contains(ip):
		return v4(12), true
	case netip.MustParsePrefix("64:ff9b:1::/48").Contains(ip):
		return v4(12), true // RFC 8215 local-use NAT64: the common /96 layout
	case netip.MustParsePrefix("2002::/16").Contains(ip):
		return v4(2), true
	case netip.MustParsePrefix("::/96").Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback():
		return v4(12), true // IPv4-compatible (deprecated, still routed by some stacks)
	}
	return netip.Addr{}, false
}

// guardControl is the dialer's Control function: it runs with the resolved address, before connect.
func guardControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot read %q", ErrRefusedAddress, address)
	}
	if why := refused(ap.Addr()); why != "" {
		return fmt.Errorf("%w: %s (set allow_private for an endpoint on this network)", ErrRefusedAddress, why)
	}
	return nil
}

// errNoRedirects stops the client at a redirect; the 3xx is then a failed delivery.
var errNoRedirects = http.ErrUseLastResponse

// newClient is one endpoint's HTTP client: no proxy (a proxy from the environment would connect
// where the guard cannot see), the guard unless allowPrivate, no redirects, the endpoint's timeout.
func newClient(timeout time.Duration, conns int, allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = guardControl
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return errNoRedirects },
	}
}
