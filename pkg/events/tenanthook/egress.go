package tenanthook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrRefusedAddress means an endpoint resolved to an address a webhook must
// never reach (private, loopback, link-local, metadata...): SSRF.
var ErrRefusedAddress = errors.New("refused address")

// refusedNets are ranges beyond netip's predicates that no endpoint may
// reach: shared address space (carrier NAT; one cloud's metadata sits
// there), the IETF and benchmarking blocks, the reserved 240/4, and
// AWS's IPv6 metadata.
var refusedNets = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// nat64 are the NAT64 prefixes: the well-known one (RFC 6052) and the
// local-use block (RFC 8215), which a network carves its own prefix from.
// The last 32 bits are taken as the IPv4 address the connection reaches,
// across the whole /48 too: a /96 within it is the usual deployment.
var nat64 = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// Refused says why a connection to addr must not be made ("" when it
// may). loopback lets a development stack deliver to a local receiver.
func Refused(addr netip.Addr, loopback bool) string {
	addr = addr.Unmap() // ::ffff:10.0.0.1 is 10.0.0.1
	for _, p := range nat64 {
		if p.Contains(addr) {
			b := addr.As16()
			addr = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
			break
		}
	}
	switch {
	case !addr.IsValid():
		return "not an address"
	case addr.IsLoopback():
		if loopback {
			return ""
		}
		return "loopback"
	case addr.IsPrivate():
		return "private"
	case addr.IsLinkLocalUnicast():
		return "link-local (cloud metadata lives there)"
	case addr.IsUnspecified():
		return "unspecified"
	case addr.IsMulticast() || addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast():
		return "multicast"
	case addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	}
	for _, p := range refusedNets {
		if p.Contains(addr) {
			return "reserved (" + p.String() + ")"
		}
	}
	return ""
}

// Egress is how the dispatcher reaches endpoints.
type Egress struct {
	// Proxy, if set, carries every request (an egress proxy such as
	// smokescreen, which then does the refusing): the dial check does not
	// apply to the proxy's own, internal, address.
	Proxy *url.URL
	// Loopback lets endpoints on 127.0.0.1/::1 be reached: development
	// and tests only (--dev).
	Loopback bool
	// Timeout bounds a whole attempt (the spec suggests 15 to 30 s).
	Timeout time.Duration
}

// Client is an HTTP client that refuses, at every connection (so after
// every resolution, on every retry), the addresses Refused names, and
// follows no redirect: a 3xx is a failed attempt (the spec's advice), so a
// redirect can never lead a delivery inward.
func (e Egress) Client() *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if e.Proxy == nil {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", ErrRefusedAddress, address, err)
			}
			if why := Refused(ap.Addr(), e.Loopback); why != "" {
				return fmt.Errorf("%w: %s is %s", ErrRefusedAddress, ap.Addr(), why)
			}
			return nil
		}
	}
	tr := &http.Transport{
		DialContext: d.DialContext,
		// At least an endpoint's largest max_inflight: fewer, and most
		// attempts to a busy endpoint opened a connection of their own.
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: e.Timeout,
		ForceAttemptHTTP2:     true,
	}
	if e.Proxy != nil {
		tr.Proxy = http.ProxyURL(e.Proxy)
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       e.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CheckURL says whether raw may be an endpoint: absolute https (http too
// when loopback is allowed, for a local receiver), no credentials in it,
// and no literal address that Refused names (a name is checked when it is
// dialled, every time).
func CheckURL(raw string, loopback bool) error {
	if len(raw) > 2048 {
		return fmt.Errorf("endpoint URL longer than 2,048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("endpoint URL: %w", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && loopback:
	case u.Scheme == "http":
		return fmt.Errorf("endpoint URL %q: https only (http is for a local receiver in development)", raw)
	default:
		return fmt.Errorf("endpoint URL %q: want an https:// URL", raw)
	}
	if u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("endpoint URL %q: no host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("endpoint URL: credentials in the URL are refused")
	}
	if u.Fragment != "" {
		return fmt.Errorf("endpoint URL %q: a fragment is never sent", raw)
	}
	host := strings.Trim(u.Hostname(), "[]")
	if a, err := netip.ParseAddr(host); err == nil {
		if why := Refused(a, loopback); why != "" {
			return fmt.Errorf("endpoint URL %q: %w: %s", raw, ErrRefusedAddress, why)
		}
	} else if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		if !loopback {
			return fmt.Errorf("endpoint URL %q: %w: loopback", raw, ErrRefusedAddress)
		}
	}
	return nil
}

// dialRefused says whether err is the dial check's refusal.
func dialRefused(err error) bool { return errors.Is(err, ErrRefusedAddress) }
