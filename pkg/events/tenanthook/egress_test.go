package tenanthook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Every address an endpoint must never reach is refused, however it is
// written; public ones pass.
func TestRefusedAddresses(t *testing.T) {
	for _, c := range []struct {
		addr    string
		refused bool
	}{
		{"127.0.0.1", true},
		{"127.8.9.10", true},
		{"::1", true},
		{"10.1.2.3", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"192.168.1.1", true},
		{"169.254.169.254", true}, // AWS, GCP, Azure metadata
		{"169.254.170.2", true},   // ECS task metadata
		{"100.100.100.200", true}, // Alibaba metadata (shared address space)
		{"fd00:ec2::254", true},   // AWS metadata over IPv6
		{"fe80::1", true},
		{"fc00::1", true},
		{"fd12:3456::1", true},
		{"::ffff:127.0.0.1", true},       // IPv4-mapped loopback
		{"::ffff:169.254.169.254", true}, // IPv4-mapped metadata
		{"::ffff:10.0.0.1", true},
		{"64:ff9b::a9fe:a9fe", true}, // NAT64 of 169.254.169.254
		{"64:ff9b::7f00:1", true},    // NAT64 of 127.0.0.1
		{"64:ff9b::a00:1", true},     // NAT64 of 10.0.0.1
		// The local-use NAT64 block (RFC 8215): a /96 anywhere in the
		// /48, the IPv4 address in its last 32 bits.
		{"64:ff9b:1::a9fe:a9fe", true},              // 169.254.169.254
		{"64:ff9b:1::a00:1", true},                  // 10.0.0.1
		{"64:ff9b:1::c0a8:101", true},               // 192.168.1.1
		{"64:ff9b:1:abcd::7f00:1", true},            // 127.0.0.1
		{"64:ff9b:1:ffff:ffff:ffff:6440:1", true},   // 100.64.0.1 (shared address space)
		{"64:ff9b:1::808:808", false},               // 8.8.8.8
		{"64:ff9b:1:abcd:ef01:2345:101:101", false}, // 1.1.1.1
		{"0.0.0.0", true},
		{"::", true},
		{"224.0.0.1", true},
		{"ff02::1", true},
		{"255.255.255.255", true},
		{"240.0.0.1", true},
		{"198.18.0.1", true},
		{"8.8.8.8", false},
		{"1.1.1.1", false},
		{"2606:4700:4700::1111", false},
		{"172.32.0.1", false},
		{"64:ff9b::808:808", false}, // NAT64 of 8.8.8.8
	} {
		a := netip.MustParseAddr(c.addr)
		if got := Refused(a, false) != ""; got != c.refused {
			t.Errorf("%s: refused %v (%q), want %v", c.addr, got, Refused(a, false), c.refused)
		}
	}
	// Development lets a local receiver in, nothing else.
	if Refused(netip.MustParseAddr("127.0.0.1"), true) != "" || Refused(netip.MustParseAddr("::ffff:127.0.0.1"), true) != "" {
		t.Error("loopback refused with loopback allowed")
	}
	if Refused(netip.MustParseAddr("169.254.169.254"), true) == "" || Refused(netip.MustParseAddr("10.0.0.1"), true) == "" {
		t.Error("loopback allowed lets private addresses in")
	}
}

func TestCheckURL(t *testing.T) {
	for _, c := range []struct {
		url      string
		loopback bool
		ok       bool
	}{
		{"https://hooks.example.com/paysched", false, true},
		{"https://hooks.example.com:8443/x?y=1", false, true},
		{"http://hooks.example.com/", false, false},
		{"http://127.0.0.1:9000/hook", true, true},
		{"http://127.0.0.1:9000/hook", false, false},
		{"https://localhost/hook", false, false},
		{"https://10.0.0.5/hook", false, false},
		{"https://[::1]/hook", false, false},
		{"https://[::ffff:169.254.169.254]/latest", false, false},
		{"https://[64:ff9b:1::a9fe:a9fe]/latest", false, false},
		{"https://[64:ff9b:1::808:808]/hook", false, true},
		{"https://169.254.169.254/latest/meta-data", true, false},
		{"https://user:pass@hooks.example.com/", false, false},
		{"ftp://hooks.example.com/", false, false},
		{"hooks.example.com/x", false, false},
		{"https:///nohost", false, false},
		{"https://hooks.example.com/#frag", false, false},
		{"https://" + strings.Repeat("a", 2050) + ".com/", false, false},
	} {
		if err := CheckURL(c.url, c.loopback); (err == nil) != c.ok {
			t.Errorf("%.60s (loopback %v): %v, want ok %v", c.url, c.loopback, err, c.ok)
		}
	}
}

// The dial check refuses at every connection, whatever the URL's name
// resolved to: here "localhost", which CheckURL cannot see through when
// written as another name, and a literal loopback.
func TestClientRefusesAtDial(t *testing.T) {
	hit := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit = true }))
	defer srv.Close()
	cl := Egress{Timeout: 5 * time.Second}.Client()
	for _, u := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, u, nil)
		_, err := cl.Do(req)
		if !errors.Is(err, ErrRefusedAddress) {
			t.Errorf("%s: %v, want ErrRefusedAddress", u, err)
		}
	}
	if hit {
		t.Fatal("the refused server was reached")
	}
	// Allowed in development.
	res, err := Egress{Timeout: 5 * time.Second, Loopback: true}.Client().Post(srv.URL, "application/json", nil)
	if err != nil {
		t.Fatalf("loopback allowed: %v", err)
	}
	res.Body.Close()
}

// A redirect is never followed: a public endpoint that answers 307 to the
// metadata address (or to anywhere) is a failed attempt, and nothing is
// dialled beyond it.
func TestRedirectsAreNotFollowed(t *testing.T) {
	followed := false
	inner := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed = true }))
	defer inner.Close()
	for _, target := range []string{"http://169.254.169.254/latest/meta-data/", inner.URL} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target, http.StatusTemporaryRedirect)
		}))
		res, err := Egress{Timeout: 5 * time.Second, Loopback: true}.Client().Post(srv.URL, "application/json", nil)
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusTemporaryRedirect || Classify(res.StatusCode) != Rejected {
			t.Errorf("redirect to %s: %d (%s), want 307 read as a failure", target, res.StatusCode, Classify(res.StatusCode))
		}
	}
	if followed {
		t.Fatal("a redirect was followed")
	}
}
