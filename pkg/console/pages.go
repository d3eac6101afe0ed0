package console

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// pageTimeout bounds every page's statements.
const pageTimeout = 5 * time.Second

func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), pageTimeout)
}

// dbFail answers a database failure: logged with context, a plain message.
func (c *Console) dbFail(w http.ResponseWriter, r *http.Request, v *view, what string, err error) {
	c.log.Error("console: "+what, "path", r.URL.Path, "err", err)
	c.fail(w, r, v, http.StatusServiceUnavailable, "The database did not answer in time ("+what+"). Try again in a moment.")
}

// ago says how long before now t was, in the largest whole unit.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh ago", int(d.Hours()))
}

// clip cuts s to n runes.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
