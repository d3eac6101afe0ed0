package login

import (
	"context"
	"strings"
	"testing"
)

func TestRolesAndNames(t *testing.T) {
	for _, c := range []struct {
		claim any
		want  Role
	}{
		{"admin", Admin},
		{"staff operator", Operator},
		{[]any{"viewer", "admin", 3}, Admin},
		{"Viewer", Viewer},
		{"root", NoRole},
		{nil, NoRole},
		{map[string]any{"admin": true}, NoRole},
	} {
		if got := claimRole(c.claim); got != c.want {
			t.Errorf("claimRole(%v) = %s, want %s", c.claim, got, c.want)
		}
	}
	for name, ok := range map[string]bool{"ada": true, "a.b-c_d@e": true, "": false, "a b": false, "é": false,
		strings.Repeat("x", 64): true, strings.Repeat("x", 65): false} {
		if ValidName(name) != ok {
			t.Errorf("ValidName(%q) = %v", name, !ok)
		}
	}
	if got := claimName(map[string]any{"email": "e@x"}, "", "sub"); got != "e@x" {
		t.Errorf("claimName falls back to email: %q", got)
	}
	if got := claimName(map[string]any{}, "nick", strings.Repeat("s", 70)); len(got) != 64 {
		t.Errorf("claimName clips the subject to 64: %d", len(got))
	}
}

func TestCookiesAndRedirectsStayOurs(t *testing.T) {
	m, err := New(context.Background(), Config{Key: []byte(strings.Repeat("k", 32)), Prefix: "/console"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.seal("session", Session{ID: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := m.SessionID(v); !ok || id != "abc" {
		t.Fatalf("SessionID(sealed) = %q, %v", id, ok)
	}
	body, sig, _ := strings.Cut(v, ".")
	for _, bad := range []string{body + ".x" + sig[1:], "x" + v, body, ""} {
		if _, ok := m.SessionID(bad); ok {
			t.Errorf("tampered cookie %q opens", bad)
		}
	}
	if _, ok := m.SessionID(v[:len(v)-1]); ok {
		t.Error("a cut signature opens")
	}
	for next, want := range map[string]string{"/console/payments?x=1": "/console/payments?x=1", "https://evil.example/": "/console/",
		"//evil.example": "/console/", "/console/..\\evil": "/console/", "/other": "/console/"} {
		if got := m.SafeNext(next); got != want {
			t.Errorf("SafeNext(%q) = %q, want %q", next, got, want)
		}
	}
	if _, err := New(context.Background(), Config{Key: []byte("short")}, nil); err == nil {
		t.Error("a short key is accepted")
	}
}
