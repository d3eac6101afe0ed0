package login

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"golang.org/x/oauth2"

	"github.com/paysched/paysched/pkg/console/login/sessiondb"
)

// recheckEvery is how often a session's role is read again from the
// identity provider: a role taken there is gone here within a minute.
const recheckEvery = time.Minute

// record writes s, with the provider's refresh token sealed (only this
// console's key opens it: a copy of the table is no credential).
func (m *Sessions) record(ctx context.Context, s *Session, refresh string) error {
	var sealed []byte
	if refresh != "" {
		var err error
		if sealed, err = m.sealToken(refresh); err != nil {
			return err
		}
	}
	now := m.cfg.Now()
	// Sessions long ended are forgotten as new ones start: the table holds
	// about a day of logins.
	if err := m.q.ForgetEndedSessions(ctx, now.Add(-24*time.Hour)); err != nil {
		return fmt.Errorf("forget ended sessions: %w", err)
	}
	if err := m.q.RecordSession(ctx, sessiondb.RecordSessionParams{ID: s.ID, Operator: s.Operator, Name: s.Name,
		Role: s.Role.String(), Via: s.Via, CreatedAt: now, ExpiresAt: s.Expires, Refresh: sealed}); err != nil {
		return fmt.Errorf("record session: %w", err)
	}
	return nil
}

// load reads session id as the server holds it (pgx.ErrNoRows when there
// is none, or it was logged out or revoked), reading its role again from
// the identity provider when the last look is a minute old.
func (m *Sessions) load(ctx context.Context, id string) (*Session, error) {
	row, err := m.q.LoadSession(ctx, id)
	if err != nil {
		return nil, err
	}
	s := Session{ID: row.ID, Operator: row.Operator, Name: row.Name, Role: ParseRole(row.Role), Via: row.Via, Expires: row.ExpiresAt}
	if s.Via == "oidc" && m.oidc != nil && len(row.Refresh) > 0 && m.cfg.Now().Sub(row.CheckedAt) >= recheckEvery {
		m.recheck(ctx, &s, row.CheckedAt)
	}
	return &s, nil
}

// recheck reads s's role again from the identity provider with its
// refresh token. One request does it (the UPDATE fenced on the last check
// picks it; a provider that rotates refresh tokens must not see the old
// one twice). The provider refusing the token (the user disabled, the
// grant revoked) or giving no console role ends the session; a provider
// that does not answer leaves the role as it was until the next check.
func (m *Sessions) recheck(ctx context.Context, s *Session, last time.Time) {
	log := m.cfg.Log
	sealed, err := m.q.ClaimRecheck(ctx, sessiondb.ClaimRecheckParams{ID: s.ID, Now: m.cfg.Now(), Last: last})
	if err != nil {
		return // another request checks it, or it just ended
	}
	rt, err := m.openToken(sealed)
	if err != nil {
		log.Warn("console: session refresh token unreadable: session ended", "operator", s.Name, "err", err)
		m.end(ctx, s, "console")
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tok, err := m.oidc.oauth.TokenSource(rctx, &oauth2.Token{RefreshToken: rt, Expiry: time.Unix(1, 0)}).Token()
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re):
		log.Warn("console: the identity provider refused the session's refresh: session ended", "operator", s.Name, "err", err)
		m.end(ctx, s, "identity provider")
		return
	case err != nil:
		log.Warn("console: session role not read again (the identity provider did not answer)", "operator", s.Name, "err", err)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := m.oidc.verifier.Verify(rctx, raw)
	var claims map[string]any
	if err == nil {
		err = idt.Claims(&claims)
	}
	if err != nil || idt.Issuer+"#"+idt.Subject != s.Operator {
		log.Warn("console: refreshed ID token refused: session ended", "operator", s.Name, "err", err)
		m.end(ctx, s, "identity provider")
		return
	}
	role := claimRole(claims[m.oidc.cfg.RolesClaim])
	if role == NoRole {
		log.Info("console: the identity provider took the operator's console role: session ended", "operator", s.Name)
		m.end(ctx, s, "identity provider")
		return
	}
	name := claimName(claims, m.oidc.cfg.NameClaim, idt.Subject)
	next := rt
	if tok.RefreshToken != "" {
		next = tok.RefreshToken // rotated
	}
	resealed, err := m.sealToken(next)
	if err != nil {
		return
	}
	if err := m.q.RecordRecheck(ctx, sessiondb.RecordRecheckParams{ID: s.ID, Role: role.String(), Name: name, Refresh: resealed}); err != nil {
		log.Warn("console: record the session's role", "err", err)
		return
	}
	if role != s.Role {
		log.Info("console: session role changed at the identity provider", "operator", name, "from", s.Role.String(), "to", role.String())
	}
	s.Role, s.Name = role, name
}

// end revokes s and marks it ended for the request that found it.
func (m *Sessions) end(ctx context.Context, s *Session, by string) {
	if err := m.Revoke(ctx, s.ID, by); err != nil {
		m.cfg.Log.Warn("console: end session", "err", err)
	}
	s.Role = NoRole
}

// Revoke ends session id on the server; by says who ended it.
func (m *Sessions) Revoke(ctx context.Context, id, by string) error {
	if err := m.q.RevokeSession(ctx, sessiondb.RevokeSessionParams{ID: id, By: by}); err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

// RevokeOperator ends every open session of one operator (as four eyes
// compare it), and says how many.
func (m *Sessions) RevokeOperator(ctx context.Context, operator, by string) (int64, error) {
	n, err := m.q.RevokeOperator(ctx, sessiondb.RevokeOperatorParams{Operator: operator, By: by})
	if err != nil {
		return 0, fmt.Errorf("revoke sessions: %w", err)
	}
	return n, nil
}

// Active is one open session, as the sessions page lists it.
type Active struct {
	Operator, Name, Role, Via string
	Created, Checked, Expires time.Time
	// Own: the session of the operator who asks.
	Own bool
}

// ActiveSessions lists the open sessions, newest first (at most 500);
// own is the asker's session id.
func (m *Sessions) ActiveSessions(ctx context.Context, own string) ([]Active, error) {
	rows, err := m.q.ActiveSessions(ctx, sessiondb.ActiveSessionsParams{Now: m.cfg.Now(), Own: own})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	list := make([]Active, len(rows))
	for i, r := range rows {
		list[i] = Active{Operator: r.Operator, Name: r.Name, Role: r.Role, Via: r.Via,
			Created: r.CreatedAt, Checked: r.CheckedAt, Expires: r.ExpiresAt, Own: r.Own}
	}
	return list, nil
}

// tokenKey is the AES key refresh tokens are sealed with, derived from the
// session key (every replica has it).
func (m *Sessions) tokenKey() []byte {
	h := hmac.New(sha256.New, m.cfg.Key)
	h.Write([]byte("console refresh token key"))
	return h.Sum(nil)
}

func (m *Sessions) sealToken(tok string) ([]byte, error) {
	block, err := aes.NewCipher(m.tokenKey())
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	n := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(n); err != nil {
		return nil, err
	}
	return gcm.Seal(n, n, []byte(tok), nil), nil
}

func (m *Sessions) openToken(b []byte) (string, error) {
	block, err := aes.NewCipher(m.tokenKey())
	if err != nil {
		return "", err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return "", err
	}
	if len(b) < gcm.NonceSize() {
		return "", errors.New("sealed token too short")
	}
	out, err := gcm.Open(nil, b[:gcm.NonceSize()], b[gcm.NonceSize():], nil)
	return string(out), err
}
