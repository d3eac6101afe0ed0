package auth_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/platform/config"
)

func writeJWKS(t *testing.T, kid string, pub *rsa.PublicKey) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwksJSON(t, kid, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jwksJSON is a JWK set holding pub as kid.
func jwksJSON(t *testing.T, kid string, pub *rsa.PublicKey) []byte {
	t.Helper()
	set := map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}}
	b, _ := json.Marshal(set)
	return b
}

// claims are a token's claims for iss/aud; an admin's are for the admin
// audience (the verifier's default, auth.DefaultAdminAudience).
func claims(sub string, admin bool) auth.Claims {
	now := time.Now()
	aud := "aud"
	if admin {
		aud = auth.DefaultAdminAudience
	}
	return auth.Claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject: sub, Issuer: "iss", Audience: jwt.ClaimStrings{aud},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
	}, Admin: admin}
}

func TestRS256FromJWKS(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	v, err := auth.NewVerifier(auth.Config{JWKSFile: writeJWKS(t, "k1", &key.PublicKey), Issuer: "iss", AdminAudience: auth.DefaultAdminAudience})
	if err != nil {
		t.Fatal(err)
	}
	signRS := func(k *rsa.PrivateKey, kid string, c auth.Claims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	p, err := v.Verify(signRS(key, "k1", claims("svc-billing", true)))
	if err != nil || p.Actor != "svc-billing" || !p.Admin {
		t.Fatalf("valid RS256: %v %+v", err, p)
	}
	if _, err := v.Verify(signRS(other, "k1", claims("x", false))); err == nil {
		t.Fatal("a token signed by an unknown key passed")
	}
	if _, err := v.Verify(signRS(key, "k2", claims("x", false))); err == nil {
		t.Fatal("an unknown kid passed")
	}
	// HS256 is not accepted when only a JWKS is configured, even with the
	// public key's bytes as the secret (algorithm confusion).
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims("x", false)).SignedString(key.PublicKey.N.Bytes())
	if _, err := v.Verify(hs); err == nil {
		t.Fatal("HS256 passed an RS256-only verifier")
	}
}

func TestMintAndVerifyHS256(t *testing.T) {
	v, err := auth.NewVerifier(auth.Config{HS256Secret: []byte("s"), Issuer: auth.DefaultIssuer, AdminAudience: auth.DefaultAdminAudience})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.Mint([]byte("s"), auth.DefaultIssuer, auth.DefaultAdminAudience, "alice", true, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.VerifyHeader("Bearer " + tok)
	if err != nil || p.Actor != "alice" || !p.Admin {
		t.Fatalf("%v %+v", err, p)
	}
	for _, h := range []string{"", "Bearer", "Bearer ", "Token " + tok, tok} {
		if _, err := v.VerifyHeader(h); err == nil {
			t.Errorf("header %q passed", h)
		}
	}
}

func TestVerifierNeedsAKey(t *testing.T) {
	if _, err := auth.NewVerifier(auth.Config{Issuer: "i", Audience: "a"}); err == nil {
		t.Fatal("a verifier without keys was built")
	}
}

// TestNeverBothAlgorithms: a verifier with an HS256 secret and a JWKS file
// would accept either; it is refused, naming both flags.
func TestNeverBothAlgorithms(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, err = auth.NewVerifier(auth.Config{HS256Secret: []byte("s"), JWKSFile: writeJWKS(t, "k1", &key.PublicKey), Issuer: "iss", Audience: "aud"})
	if err == nil || !strings.Contains(err.Error(), "--jwt-secret") || !strings.Contains(err.Error(), "--jwt-jwks-file") {
		t.Fatalf("both algorithms: %v, want a refusal naming both flags", err)
	}
}

// TestAdminNeedsTheAdminAudience: each API accepts one kind of token. The
// payments API's verifier refuses a token for the admin audience (a
// leaked admin token is no payer), and the admin API's refuses a payer's
// token, admin claim or not; the claim counts only in a token for the
// admin audience.
func TestAdminNeedsTheAdminAudience(t *testing.T) {
	payer, err := auth.NewVerifier(auth.Config{HS256Secret: []byte("s"), Issuer: auth.DefaultIssuer, Audience: auth.DefaultAudience})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := auth.NewVerifier(auth.Config{HS256Secret: []byte("s"), Issuer: auth.DefaultIssuer, AdminAudience: auth.DefaultAdminAudience})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v         *auth.Verifier
		api       string
		aud       string
		admin     bool
		ok, isAdm bool
	}{
		{admin, "admin", auth.DefaultAdminAudience, true, true, true},
		{admin, "admin", auth.DefaultAdminAudience, false, true, false},
		{admin, "admin", auth.DefaultAudience, true, false, false},
		{payer, "payments", auth.DefaultAudience, false, true, false},
		{payer, "payments", auth.DefaultAudience, true, true, false},
		{payer, "payments", auth.DefaultAdminAudience, true, false, false},
		{payer, "payments", "someone-else", false, false, false},
	} {
		tok, err := auth.Mint([]byte("s"), auth.DefaultIssuer, tc.aud, "alice", tc.admin, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tc.v.VerifyHeader("Bearer " + tok)
		if (err == nil) != tc.ok || p.Admin != tc.isAdm {
			t.Errorf("%s API, aud %s admin %v: %+v %v, want ok=%v admin=%v", tc.api, tc.aud, tc.admin, p, err, tc.ok, tc.isAdm)
		}
	}
	for _, c := range []auth.Config{
		{HS256Secret: []byte("s"), Issuer: "i", Audience: "a", AdminAudience: "b"},
		{HS256Secret: []byte("s"), Issuer: "i"},
	} {
		if _, err := auth.NewVerifier(c); err == nil {
			t.Errorf("%+v: a verifier must accept exactly one audience", c)
		}
	}
}

// TestTokenLifetimeAndType: a token living longer than MaxLifetime (exp -
// iat), one without iat, and one that is not an access token (typ) are
// refused.
func TestTokenLifetimeAndType(t *testing.T) {
	v, err := auth.NewVerifier(auth.Config{HS256Secret: []byte("s"), Issuer: "iss", Audience: "aud", MaxLifetime: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sign := func(c jwt.RegisteredClaims, typ any) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, auth.Claims{RegisteredClaims: c})
		if typ == nil {
			delete(tok.Header, "typ")
		} else {
			tok.Header["typ"] = typ
		}
		s, _ := tok.SignedString([]byte("s"))
		return s
	}
	base := func(life time.Duration) jwt.RegisteredClaims {
		return jwt.RegisteredClaims{Subject: "alice", Issuer: "iss", Audience: jwt.ClaimStrings{"aud"},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(life))}
	}
	noIat := base(time.Minute)
	noIat.IssuedAt = nil
	for _, c := range []struct {
		name string
		tok  string
		ok   bool
	}{
		{"15 minutes", sign(base(15*time.Minute), "JWT"), true},
		{"an RFC 9068 access token", sign(base(time.Minute), "at+jwt"), true},
		{"16 minutes", sign(base(16*time.Minute), "JWT"), false},
		{"a day", sign(base(24*time.Hour), "JWT"), false},
		{"no iat", sign(noIat, "JWT"), false},
		{"an ID token's typ", sign(base(time.Minute), "id_token+jwt"), false},
		{"no typ", sign(base(time.Minute), nil), false},
	} {
		if _, err := v.Verify(c.tok); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// TestJWKSRefresh: a key the issuer rotates in is accepted without a
// restart: a token naming a kid the set lacks makes it be read again.
func TestJWKSRefresh(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	file := writeJWKS(t, "k1", &k1.PublicKey)
	v, err := auth.NewVerifier(auth.Config{JWKSFile: file, Issuer: "iss", AdminAudience: auth.DefaultAdminAudience, JWKSRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k *rsa.PrivateKey, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims("ops", true))
		tok.Header["kid"] = kid
		s, _ := tok.SignedString(k)
		return s
	}
	if _, err := v.Verify(sign(k1, "k1")); err != nil {
		t.Fatal(err)
	}
	// The issuer rotates: the set now holds k2 only.
	if err := os.WriteFile(file, jwksJSON(t, "k2", &k2.PublicKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(sign(k2, "k2")); err != nil {
		t.Fatalf("a token of the rotated-in key: %v", err)
	}
}

// TestHS256SecretForTheMode: with a JWKS file there is no HS256 secret;
// without one, production needs a secret of its own and development falls
// back to the published one.
func TestHS256SecretForTheMode(t *testing.T) {
	prod, dev := &config.Mode{}, &config.Mode{Dev: true}
	strong := strings.Repeat("s", config.MinSecretLen)
	for _, tc := range []struct {
		name    string
		mode    *config.Mode
		value   string
		jwks    string
		want    string
		wantErr string
	}{
		{"production, RS256", prod, "", "jwks.json", "", ""},
		{"production, nothing", prod, "", "", "", "no token verifier"},
		{"production, published", prod, auth.DevSecret, "", "", "development secret"},
		{"production, own secret", prod, strong, "", strong, ""},
		{"development, nothing", dev, "", "", auth.DevSecret, ""},
		{"development, RS256", dev, "", "jwks.json", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := auth.HS256Secret(tc.mode, &config.Secret{Name: "jwt-secret", Value: tc.value}, tc.jwks)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%q %v, want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%q %v, want %q", got, err, tc.want)
			}
		})
	}
}

// A token's tenant is its claim, else its client's configured tenant, else
// the issuer's default: never its subject. So a payer whose id is another
// tenant's name does not share (or merge) that tenant's caps, and an
// issuer minting many subjects without a tenant claim gets one share.
func TestTenantNeverComesFromThePayer(t *testing.T) {
	secret := []byte("s")
	v, err := auth.NewVerifier(auth.Config{HS256Secret: secret, Issuer: auth.DefaultIssuer, Audience: auth.DefaultAudience,
		ClientTenants: map[string]string{"billing-app": "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(sub, tenant, azp, clientID string) string {
		now := time.Now()
		c := auth.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: sub, Issuer: auth.DefaultIssuer,
			Audience: jwt.ClaimStrings{auth.DefaultAudience}, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute))},
			Tenant: tenant, AuthorizedParty: azp, ClientID: clientID}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, tc := range []struct {
		name, sub, tenant, azp, clientID, want string
	}{
		{"a claim", "alice", "acme", "", "", "acme"},
		{"a payer named like a tenant, no claim", "acme", "", "", "", auth.DefaultTenant},
		{"many subjects, no claim: one tenant", "user-12345", "", "", "", auth.DefaultTenant},
		{"the client's tenant (azp)", "bob", "", "billing-app", "", "billing"},
		{"the client's tenant (client_id)", "bob", "", "", "billing-app", "billing"},
		{"the claim over the client's", "bob", "acme", "billing-app", "", "acme"},
		{"an unknown client", "bob", "", "other-app", "", auth.DefaultTenant},
	} {
		p, err := v.Verify(mint(tc.sub, tc.tenant, tc.azp, tc.clientID))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Tenant != tc.want {
			t.Errorf("%s: tenant %q, want %q", tc.name, p.Tenant, tc.want)
		}
		// Only the claim or the client's tenant names one (the default
		// does not: it may not manage webhook endpoints).
		if named := tc.want != auth.DefaultTenant; p.TenantNamed != named {
			t.Errorf("%s: tenant named %v, want %v", tc.name, p.TenantNamed, named)
		}
	}
	// A default of its own, and refused names.
	own, err := auth.NewVerifier(auth.Config{HS256Secret: secret, Issuer: auth.DefaultIssuer, Audience: auth.DefaultAudience, DefaultTenant: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := own.Verify(mint("carol", "", "", "")); err != nil || p.Tenant != "platform" {
		t.Fatalf("tenant %q (%v), want the configured default", p.Tenant, err)
	}
	for _, bad := range []string{" ", "a\x00b", strings.Repeat("x", 257)} {
		if _, err := auth.NewVerifier(auth.Config{HS256Secret: secret, Issuer: auth.DefaultIssuer, Audience: auth.DefaultAudience, DefaultTenant: bad}); err == nil {
			t.Errorf("default tenant %q accepted", bad)
		}
		if _, err := v.Verify(mint("dave", bad, "", "")); err == nil && strings.TrimSpace(bad) != "" {
			t.Errorf("tenant claim %q accepted", bad)
		}
	}
}
