package console

import (
	"fmt"
	"html/template"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/paysched/paysched/pkg/payment"
)

// parseTemplates parses each page with the layout (templates/layout.html
// defines "layout"; a page defines "content").
func parseTemplates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"money": money,
		// minor says an amount exactly, whatever its currency's exponent.
		"minor": func(n int64, cur string) string { return num(n) + " " + cur + " (minor units)" },
		"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"whenp": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05")
		},
		"day":     func(t time.Time) string { return t.UTC().Format("2006-01-02") },
		"num":     num,
		"f1":      func(v float64) string { return fmt.Sprintf("%.1f", v) },
		"f2":      func(v float64) string { return fmt.Sprintf("%.2f", v) },
		"lower":   strings.ToLower,
		"prefix":  func() string { return Prefix },
		"svg":     func(v any) template.HTML { h, _ := v.(template.HTML); return h },
		"isnav":   func(cur, p string) bool { return cur == p || p != Prefix+"/" && strings.HasPrefix(cur, p) },
		"chosen":  func(a, b string) bool { return a == b },
		"statusc": func(s any) string { return "st-" + strings.ToLower(fmt.Sprint(s)) },
		// movable: an operator may act on a payment in this status from the
		// search (hold, release, reschedule, run now, cancel).
		"movable": func(s string) bool { return openActions[payment.Status(s)] != nil },
	}
	pages, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, p := range pages {
		name := path.Base(p)
		if name == "layout.html" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", p)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// money shows minor units with two decimals and the currency code.
func money(minor int64, cur string) string {
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s%s.%02d %s", sign, num(minor/100), minor%100, cur)
}

// num groups thousands.
func num(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
