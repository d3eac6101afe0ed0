package console

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// pageTimeout bounds every page's statements: page gives each handler's
// request this deadline, so no handler can forget it.
const pageTimeout = 5 * time.Second

// dbFail answers a database failure: logged with context, a plain message.
func (c *Console) dbFail(w http.ResponseWriter, r *http.Request, v *view, what string, err error) {
	c.log.Error("console: "+what, "path", r.URL.Path, "err", err)
	c.fail(w, r, v, http.StatusServiceUnavailable, "The database did not answer in time ("+what+"). Try again in a moment.")
}

// pathUUID reads the id in the path; a bad one is answered here with
// bad (ok false).
func (c *Console) pathUUID(w http.ResponseWriter, r *http.Request, v *view, bad string) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, v, http.StatusBadRequest, bad)
		return uuid.Nil, false
	}
	return id, true
}

// pathNumber reads the positive number the path names name (a request's,
// a run's); a bad one is answered here with bad (ok false).
func (c *Console) pathNumber(w http.ResponseWriter, r *http.Request, v *view, name, bad string) (int64, bool) {
	n, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || n <= 0 {
		c.fail(w, r, v, http.StatusBadRequest, bad)
		return 0, false
	}
	return n, true
}

// beforeParam is where a list's page link says the page starts: a
// positive position, def without one. A damaged link is answered here
// (ok false).
func (c *Console) beforeParam(w http.ResponseWriter, r *http.Request, v *view, def int64) (int64, bool) {
	b := r.URL.Query().Get("before")
	if b == "" {
		return def, true
	}
	n, err := strconv.ParseInt(b, 10, 64)
	if err != nil || n <= 0 {
		c.fail(w, r, v, http.StatusBadRequest, "The page link is damaged: open the list again.")
		return 0, false
	}
	return n, true
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
