package console

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/oauth2"
)

// recheckEvery is how often a session's role is read again from the
// identity provider: a role taken there is gone here within a minute.
const recheckEvery = time.Minute

// recordSession writes s, with the provider's refresh token sealed (only
// this console's key opens it: a copy of the table is no credential).
func (c *Console) recordSession(ctx context.Context, s *Session, refresh string) error {
	var sealed []byte
	if refresh != "" {
		var err error
		if sealed, err = c.sealToken(refresh); err != nil {
			return err
		}
	}
	now := c.now()
	// Sessions long ended are forgotten as new ones start: the table holds
	// about a day of logins.
	if _, err := c.db.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at < $1`, now.Add(-24*time.Hour)); err != nil {
		return fmt.Errorf("forget ended sessions: %w", err)
	}
	if _, err := c.db.Exec(ctx, `INSERT INTO console_sessions (id, operator, name, role, via, created_at, expires_at, checked_at, refresh)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $6, $8)`, s.ID, s.Operator, s.Name, s.Role.String(), s.Via, now, s.Expires, sealed); err != nil {
		return fmt.Errorf("record session: %w", err)
	}
	return nil
}

// loadSession reads session id as the server holds it (pgx.ErrNoRows when
// there is none, or it was logged out or revoked), reading its role again
// from the identity provider when the last look is a minute old.
func (c *Console) loadSession(ctx context.Context, id string) (*Session, error) {
	var s Session
	var role string
	var checked time.Time
	var refresh []byte
	err := c.db.QueryRow(ctx, `SELECT id, operator, name, role, via, expires_at, checked_at, refresh FROM console_sessions
		WHERE id = $1 AND revoked_at IS NULL`, id).Scan(&s.ID, &s.Operator, &s.Name, &role, &s.Via, &s.Expires, &checked, &refresh)
	if err != nil {
		return nil, err
	}
	s.Role = ParseRole(role)
	if s.Via == "oidc" && c.oidc != nil && len(refresh) > 0 && c.now().Sub(checked) >= recheckEvery {
		c.recheck(ctx, &s, checked)
	}
	return &s, nil
}

// recheck reads s's role again from the identity provider with its
// refresh token. One request does it (the UPDATE fenced on the last check
// picks it; a provider that rotates refresh tokens must not see the old
// one twice). The provider refusing the token (the user disabled, the
// grant revoked) or giving no console role ends the session; a provider
// that does not answer leaves the role as it was until the next check.
func (c *Console) recheck(ctx context.Context, s *Session, last time.Time) {
	var sealed []byte
	err := c.db.QueryRow(ctx, `UPDATE console_sessions SET checked_at = $2 WHERE id = $1 AND checked_at = $3 AND revoked_at IS NULL
		RETURNING refresh`, s.ID, c.now(), last).Scan(&sealed)
	if err != nil {
		return // another request checks it, or it just ended
	}
	rt, err := c.openToken(sealed)
	if err != nil {
		c.log.Warn("console: session refresh token unreadable: session ended", "operator", s.Name, "err", err)
		c.endSession(ctx, s, "console")
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tok, err := c.oidc.oauth.TokenSource(rctx, &oauth2.Token{RefreshToken: rt, Expiry: time.Unix(1, 0)}).Token()
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re):
		c.log.Warn("console: the identity provider refused the session's refresh: session ended", "operator", s.Name, "err", err)
		c.endSession(ctx, s, "identity provider")
		return
	case err != nil:
		c.log.Warn("console: session role not read again (the identity provider did not answer)", "operator", s.Name, "err", err)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := c.oidc.verifier.Verify(rctx, raw)
	var claims map[string]any
	if err == nil {
		err = idt.Claims(&claims)
	}
	if err != nil || idt.Issuer+"#"+idt.Subject != s.Operator {
		c.log.Warn("console: refreshed ID token refused: session ended", "operator", s.Name, "err", err)
		c.endSession(ctx, s, "identity provider")
		return
	}
	role := claimRole(claims[c.oidc.cfg.RolesClaim])
	if role == NoRole {
		c.log.Info("console: the identity provider took the operator's console role: session ended", "operator", s.Name)
		c.endSession(ctx, s, "identity provider")
		return
	}
	name := claimName(claims, c.oidc.cfg.NameClaim, idt.Subject)
	next := rt
	if tok.RefreshToken != "" {
		next = tok.RefreshToken // rotated
	}
	resealed, err := c.sealToken(next)
	if err != nil {
		return
	}
	if _, err := c.db.Exec(ctx, `UPDATE console_sessions SET role = $2, name = $3, refresh = $4 WHERE id = $1 AND revoked_at IS NULL`,
		s.ID, role.String(), name, resealed); err != nil {
		c.log.Warn("console: record the session's role", "err", err)
		return
	}
	if role != s.Role {
		c.log.Info("console: session role changed at the identity provider", "operator", name, "from", s.Role.String(), "to", role.String())
	}
	s.Role, s.Name = role, name
}

// endSession revokes s and marks it ended for the request that found it.
func (c *Console) endSession(ctx context.Context, s *Session, by string) {
	if err := c.revokeSession(ctx, s.ID, by); err != nil {
		c.log.Warn("console: end session", "err", err)
	}
	s.Role = NoRole
}

// revokeSession ends session id on the server.
func (c *Console) revokeSession(ctx context.Context, id, by string) error {
	if _, err := c.db.Exec(ctx, `UPDATE console_sessions SET revoked_at = now(), revoked_by = $2, refresh = NULL
		WHERE id = $1 AND revoked_at IS NULL`, id, by); err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

// tokenKey is the AES key refresh tokens are sealed with, derived from the
// session key (every replica has it).
func (c *Console) tokenKey() []byte {
	m := hmac.New(sha256.New, c.cfg.SessionKey)
	m.Write([]byte("console refresh token key"))
	return m.Sum(nil)
}

func (c *Console) sealToken(tok string) ([]byte, error) {
	block, err := aes.NewCipher(c.tokenKey())
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

func (c *Console) openToken(b []byte) (string, error) {
	block, err := aes.NewCipher(c.tokenKey())
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

// activeSession is one row of the sessions page.
type activeSession struct {
	Operator, Name, Role, Via string
	Created, Checked, Expires time.Time
	Own                       bool
}

// sessionsPage lists the sessions that are open (admin).
func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	rows, err := c.db.Query(ctx, `SELECT operator, name, role, via, created_at, checked_at, expires_at, id = $2 FROM console_sessions
		WHERE revoked_at IS NULL AND expires_at > $1 ORDER BY created_at DESC LIMIT 500`, c.now(), v.Session.ID)
	if err != nil {
		c.dbFail(w, r, v, "list sessions", err)
		return
	}
	defer rows.Close()
	var list []activeSession
	for rows.Next() {
		var a activeSession
		if err := rows.Scan(&a.Operator, &a.Name, &a.Role, &a.Via, &a.Created, &a.Checked, &a.Expires, &a.Own); err != nil {
			c.dbFail(w, r, v, "list sessions", err)
			return
		}
		list = append(list, a)
	}
	if err := rows.Err(); err != nil {
		c.dbFail(w, r, v, "list sessions", err)
		return
	}
	v.Title, v.Data = "Sessions", map[string]any{"Sessions": list}
	c.render(w, http.StatusOK, "sessions.html", v)
}

// revokeOperator ends every open session of one operator (admin): their
// next page asks them to log in again.
func (c *Console) revokeOperator(w http.ResponseWriter, r *http.Request, v *view) {
	op := r.PostForm.Get("operator")
	if op == "" || len(op) > 600 {
		c.fail(w, r, v, http.StatusBadRequest, "Name the operator whose sessions to end.")
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	tag, err := c.db.Exec(ctx, `UPDATE console_sessions SET revoked_at = now(), revoked_by = $2, refresh = NULL
		WHERE operator = $1 AND revoked_at IS NULL`, op, v.Session.Operator)
	if err != nil {
		c.dbFail(w, r, v, "revoke sessions", err)
		return
	}
	c.log.Info("console: sessions revoked", "operator", op, "sessions", tag.RowsAffected(), "by", v.Session.Name, "identity", v.Session.Operator)
	http.Redirect(w, r, Prefix+"/sessions", http.StatusSeeOther)
}
