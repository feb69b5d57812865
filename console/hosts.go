package console

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// An open console (no token, on loopback) trusts whoever reaches it, and a web page can reach it: it
// points its own name at 127.0.0.1 (DNS rebinding), and the browser then treats the console as that
// page's own origin, lets it read the CSRF token and post the forms. What the page cannot change is the
// name the browser sends: Host (and Origin) still say evil.example. So an open console answers only
// requests that name a loopback host, on every path, and refuses an Origin that is not its own.
//
// Other names are not configurable on purpose: reaching the console by any other name (a proxy, an
// alias) means it is reached from beyond this machine's loopback, and that is what the operator token
// is for. With a token any Host is answered: a rebound page has neither the token nor the login cookie
// (it is bound to the name the operator logged in with, and SameSite=Strict).

// LoopbackHost reports whether host, a Host header or an origin's host with or without a port, names
// this machine's loopback: localhost, 127.0.0.0/8 or [::1]. Browsers resolve localhost themselves
// (never through DNS), so no page can give its own name one of these spellings.
func LoopbackHost(host string) bool {
	name := hostName(host)
	if name == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.Unmap().IsLoopback()
}

// hostName is host without its port and brackets, lower case, without a final dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// refusal is why a request to an open console was refused, with its status.
type refusal struct {
	code int
	msg  string
}

// checkNames refuses a request to the open console that names another host, or comes from a page on
// another origin. A navigation from another site (a link) carries no Origin and is let through: it
// reads nothing the user does not see, and its actions still need the CSRF token.
func checkNames(r *http.Request) *refusal {
	if !LoopbackHost(r.Host) {
		return &refusal{http.StatusMisdirectedRequest, fmt.Sprintf("refused: this console has no operator token, so it answers "+
			"only to loopback names (localhost, 127.0.0.1, [::1]), and this request was for %q. A web page that points its "+
			"own name at this machine gets nothing. To reach the console by another name, set the operator token.", r.Host)}
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if !sameOrigin(origin, r.Host) { // the Host is a loopback name: so is a same Origin
		return &refusal{http.StatusForbidden, fmt.Sprintf("refused: the request came from a page on %q, not from this console "+
			"(reload the console's own page and try again)", origin)}
	}
	return nil
}
