package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// keySet holds the RS256 verification keys of a JWKS, read from a file or
// an issuer's URL, and read again every refresh interval and whenever a
// token names a key it does not know (at most every unknownKIDEvery): a
// key the issuer rotates in is accepted within seconds, without a restart,
// and one it retires is dropped at the next refresh.
type keySet struct {
	kf keyfunc.Keyfunc
}

// unknownKIDEvery bounds how often a token naming an unknown key makes
// the set be read again (a flood of forged kids must not hammer the
// issuer).
const unknownKIDEvery = 10 * time.Second

// newKeySet reads the set from file or rawURL (one of them) and starts
// refreshing it; it fails if the first read fails.
func newKeySet(file, rawURL string, refresh time.Duration) (*keySet, error) {
	if refresh <= 0 {
		refresh = 5 * time.Minute
	}
	client := &http.Client{Timeout: 10 * time.Second}
	u := rawURL
	if file != "" {
		abs, err := filepath.Abs(file)
		if err != nil {
			return nil, fmt.Errorf("auth: JWKS file %s: %w", file, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("auth: read JWKS: %w", err)
		}
		// The file is read through the same refreshing client as a URL.
		t := &http.Transport{}
		t.RegisterProtocol("file", http.NewFileTransport(http.Dir("/")))
		client.Transport = t
		u = (&url.URL{Scheme: "file", Path: abs}).String()
	} else if p, err := url.Parse(rawURL); err != nil || p.Scheme != "https" && p.Scheme != "http" || p.Host == "" {
		return nil, fmt.Errorf("auth: --jwt-jwks-url %q: want an https URL", rawURL)
	}
	fail := false
	kf, err := keyfunc.NewDefaultOverrideCtx(context.Background(), []string{u}, keyfunc.Override{
		Client:                    client,
		HTTPTimeout:               10 * time.Second,
		RefreshInterval:           refresh,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(unknownKIDEvery), 1),
		NoErrorReturnFirstHTTPReq: &fail,
		RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
			return func(context.Context, error) {} // the last good set stays in use
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: read JWKS %s: %w", u, err)
	}
	ks := &keySet{kf: kf}
	if n, err := ks.count(); err != nil || n == 0 {
		return nil, fmt.Errorf("auth: JWKS %s has no RSA signing keys", u)
	}
	return ks, nil
}

// count is how many keys the set holds.
func (k *keySet) count() (int, error) {
	keys, err := k.kf.Storage().KeyReadAll(context.Background())
	return len(keys), err
}

// keyFor returns the key a token names (or every key, for a token that
// names none).
func (k *keySet) keyFor(t *jwt.Token) (any, error) {
	key, err := k.kf.Keyfunc(t)
	if err != nil {
		kid, _ := t.Header["kid"].(string)
		return nil, errors.Join(fmt.Errorf("unknown key id %q", kid), err)
	}
	return key, nil
}
