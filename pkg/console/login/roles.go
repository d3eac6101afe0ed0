// Package login is the operator console's login: who an operator is (a
// role and an identity), the sessions the server holds for them
// (console_sessions), the signed cookies and CSRF tokens that carry them,
// and the OpenID Connect flow that starts them in production. The console
// (package console) draws the pages; this package decides who is there.
package login

import (
	"strings"
)

// Role is what an operator may do; each includes the ones before it.
type Role int

// The console's roles.
const (
	NoRole Role = iota
	// Viewer reads every page.
	Viewer
	// Operator also acts on one payment and starts reconciliation runs.
	Operator
	// Admin also requests bulk actions and approves others' requests.
	Admin
)

// String names the role as the login form and the claims spell it.
func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Operator:
		return "operator"
	case Admin:
		return "admin"
	}
	return "none"
}

// ParseRole reads a role name ("viewer", "operator", "admin").
func ParseRole(s string) Role {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return Viewer
	case "operator":
		return Operator
	case "admin":
		return Admin
	}
	return NoRole
}

// Identity is who logs in: the compared identity and the shown name.
type Identity struct {
	// Operator is what four eyes compare: the identity provider's issuer
	// and subject ("<iss>#<sub>"), or "dev:<name>" for the local login.
	// Never a display name.
	Operator string
	// Name is shown and audited, never compared.
	Name string
}

// DevIdentity is the local login's identity: development only, where any
// name is anyone.
func DevIdentity(name string) Identity { return Identity{Operator: "dev:" + name, Name: name} }

// oidcIdentity is a provider's user: its issuer and subject, which it
// never reassigns, and the name it shows.
func oidcIdentity(iss, sub, name string) Identity {
	return Identity{Operator: iss + "#" + sub, Name: name}
}

// ValidName says s may be a local login's name, as the audit log shows
// it: 1 to 64 letters, digits, '.', '_', '-' or '@'.
func ValidName(s string) bool {
	if s == "" || len([]rune(s)) > 64 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-@", r)
		if !ok {
			return false
		}
	}
	return true
}
