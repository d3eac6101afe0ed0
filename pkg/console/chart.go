package console

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"
)

// series is one line of a chart.
type series struct {
	Name  string
	Class string // CSS class for its stroke (s1, s2, s3)
	X     []time.Time
	Y     []float64
}

const (
	chartW, chartH = 720, 180
	padL, padR     = 56, 12
	padT, padB     = 12, 28
)

// lineChart draws series over [from, to] as an SVG, with a y axis from 0
// to the highest value, a title for screen readers and a legend.
func lineChart(title, unit string, from, to time.Time, ss []series) template.HTML {
	var b strings.Builder
	ymax := 0.0
	for _, s := range ss {
		for _, y := range s.Y {
			ymax = math.Max(ymax, y)
		}
	}
	ymax = niceCeil(ymax)
	span := to.Sub(from).Seconds()
	x := func(t time.Time) float64 {
		return padL + (chartW-padL-padR)*math.Max(0, math.Min(1, t.Sub(from).Seconds()/span))
	}
	y := func(v float64) float64 { return padT + (chartH-padT-padB)*(1-v/ymax) }
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-labelledby="t-%s"><title id="t-%s">%s</title>`,
		chartW, chartH, idOf(title), idOf(title), html.EscapeString(title))
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`,
			padL, chartW-padR, y(v), y(v), padL-4, y(v)+4, html.EscapeString(short(v)+unit))
	}
	for i := 0; i <= 4; i++ {
		t := from.Add(time.Duration(float64(to.Sub(from)) * float64(i) / 4))
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(t), chartH-8, t.UTC().Format("15:04"))
	}
	for _, s := range ss {
		if len(s.X) == 0 {
			continue
		}
		var pts []string
		for i := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.X[i]), y(s.Y[i])))
		}
		fmt.Fprintf(&b, `<polyline class="line %s" points="%s"/>`, s.Class, strings.Join(pts, " "))
	}
	lx := padL + 8
	for _, s := range ss {
		fmt.Fprintf(&b, `<rect class="key %s" x="%d" y="%d" width="10" height="10"/><text class="axis" x="%d" y="%d">%s</text>`,
			s.Class, lx, padT, lx+14, padT+9, html.EscapeString(s.Name))
		lx += 24 + 7*len(s.Name)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from escaped text and numbers only
}

// barChart draws one bar per minute (count) over [from, to].
func barChart(title string, from, to time.Time, xs []time.Time, ys []float64) template.HTML {
	var b strings.Builder
	ymax := 0.0
	for _, v := range ys {
		ymax = math.Max(ymax, v)
	}
	ymax = niceCeil(ymax)
	span := to.Sub(from).Seconds()
	plotW := float64(chartW - padL - padR)
	bw := math.Max(1, plotW/(span/60))
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-labelledby="t-%s"><title id="t-%s">%s</title>`,
		chartW, chartH, idOf(title), idOf(title), html.EscapeString(title))
	yOf := func(v float64) float64 { return padT + (chartH-padT-padB)*(1-v/ymax) }
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`,
			padL, chartW-padR, yOf(v), yOf(v), padL-4, yOf(v)+4, short(v))
	}
	for i := 0; i <= 4; i++ {
		t := from.Add(time.Duration(float64(to.Sub(from)) * float64(i) / 4))
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			padL+plotW*float64(i)/4, chartH-8, t.UTC().Format("Jan 2 15:04"))
	}
	for i := range xs {
		px := padL + plotW*xs[i].Sub(from).Seconds()/span
		if px < padL || px > float64(chartW-padR) {
			continue
		}
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, px, yOf(ys[i]), bw, yOf(0)-yOf(ys[i]))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func idOf(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}
