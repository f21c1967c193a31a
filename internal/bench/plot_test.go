package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// plotSeries is one line of the throughput plot.
type plotSeries struct {
	label  string
	color  color.RGBA
	dashed bool
	// guide marks a line drawn for reference, not measured: no markers,
	// and it does not scale the y axis.
	guide bool
	// y holds one value per point of the sweep; NaN leaves a point out.
	y []float64
}

// Plot geometry, in pixels.
const (
	plotW, plotH         = 1100, 600
	plotLeft, plotRight  = 80, 300
	plotTop, plotBottom  = 56, 64
	plotLineWidth        = 3
	plotMarker           = 4
	plotLegendLineLength = 28
)

var (
	plotBlack = color.RGBA{0x20, 0x20, 0x20, 0xff}
	plotGrid  = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	plotAxis  = color.RGBA{0x60, 0x60, 0x60, 0xff}
)

// plotThroughput draws rides/s against client concurrency: the service
// beside the floor and the seed's design, and the service with Stripe
// latency beside the bound that latency sets.
func plotThroughput(w io.Writer, cfg benchConfig, points []*benchPoint) error {
	if len(points) == 0 {
		return fmt.Errorf("plot: no points")
	}
	series := []plotSeries{
		{label: "service", color: color.RGBA{0x1f, 0x5f, 0xbf, 0xff}},
		{label: "floor (pgbench, 2 commits)", color: color.RGBA{0x2a, 0x9d, 0x3a, 0xff}},
		{label: "seed design, retries back off", color: color.RGBA{0xd0, 0x30, 0x30, 0xff}},
		{label: "seed design, retries at once", color: color.RGBA{0xd0, 0x30, 0x30, 0xff}, dashed: true},
	}
	if cfg.StripeLatency > 0 {
		series = append(series,
			plotSeries{label: "service, Stripe latency " + cfg.StripeLatency.String(), color: color.RGBA{0xe0, 0x8a, 0x10, 0xff}},
			plotSeries{label: "bound: clients / latency", color: color.RGBA{0x90, 0x90, 0x90, 0xff}, dashed: true, guide: true},
		)
	}
	xs := make([]int, len(points))
	for i, p := range points {
		xs[i] = p.Clients
		series[0].y = append(series[0].y, nanIfZero(p.New.PerSec()))
		series[1].y = append(series[1].y, nanIfZero(p.Floor.TPS))
		series[2].y = append(series[2].y, nanIfZero(p.Seed.TPS))
		series[3].y = append(series[3].y, nanIfZero(p.SeedNow.TPS))
		if cfg.StripeLatency > 0 {
			series[4].y = append(series[4].y, nanIfZero(p.Slow.PerSec()))
			series[5].y = append(series[5].y, bound(p.Clients, cfg.StripeLatency))
		}
	}

	// The bound grows without limit: scale the y axis to the measured
	// series, and let the bound run off the top.
	yMax := 0.0
	for _, s := range series {
		if s.guide {
			continue
		}
		for _, v := range s.y {
			if !math.IsNaN(v) {
				yMax = max(yMax, v)
			}
		}
	}
	yMax, yStep := niceScale(yMax * 1.08)

	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	x0, x1 := plotLeft, plotW-plotRight
	y0, y1 := plotH-plotBottom, plotTop // y1 is the top
	lx := func(c int) float64 { return math.Log2(float64(max(c, 1))) }
	xMin, xMax := lx(xs[0]), lx(xs[len(xs)-1])
	px := func(c int) int {
		if xMax == xMin {
			return (x0 + x1) / 2
		}
		return x0 + 20 + int((lx(c)-xMin)/(xMax-xMin)*float64(x1-x0-40))
	}
	py := func(v float64) int { return y0 - int(v/yMax*float64(y0-y1)) }

	// Grid, ticks and labels.
	for v := 0.0; v <= yMax+yStep/2; v += yStep {
		y := py(v)
		hline(img, x0, x1, y, plotGrid)
		label := fmt.Sprintf("%.0f", v)
		drawText(img, x0-8-textWidth(label), y+4, label, plotBlack)
	}
	for _, c := range xs {
		x := px(c)
		vline(img, x, y1, y0, plotGrid)
		label := fmt.Sprint(c)
		drawText(img, x-textWidth(label)/2, y0+18, label, plotBlack)
	}
	hline(img, x0, x1, y0, plotAxis)
	vline(img, x0, y1, y0, plotAxis)
	drawText(img, x0, y1-10, "rides/s", plotBlack)
	xl := "concurrent clients (log scale)"
	drawText(img, (x0+x1)/2-textWidth(xl)/2, y0+44, xl, plotBlack)
	title := "Atomic Rides: new rides per second against concurrency"
	drawText(img, (x0+x1)/2-textWidth(title)/2, 24, title, plotBlack)

	// Lines, clipped to the plot area, then markers.
	clip := image.Rect(x0, y1, x1+1, y0+1)
	for _, s := range series {
		for i := 1; i < len(xs); i++ {
			if math.IsNaN(s.y[i-1]) || math.IsNaN(s.y[i]) {
				continue
			}
			line(img, clip, px(xs[i-1]), py(s.y[i-1]), px(xs[i]), py(s.y[i]), s.color, s.dashed)
		}
		if s.guide {
			continue
		}
		for i, c := range xs {
			if !math.IsNaN(s.y[i]) {
				square(img, clip, px(c), py(s.y[i]), plotMarker, s.color)
			}
		}
	}

	// Legend, right of the plot.
	lw := 0
	for _, s := range series {
		lw = max(lw, textWidth(s.label))
	}
	lxp, lyp := x1+24, y1+12
	legend := image.Rect(lxp-8, lyp-8, lxp+plotLegendLineLength+10+lw+8, lyp+len(series)*18+2)
	rect(img, legend, plotAxis)
	for i, s := range series {
		y := lyp + i*18 + 6
		line(img, img.Bounds(), lxp, y, lxp+plotLegendLineLength, y, s.color, s.dashed)
		if !s.guide {
			square(img, img.Bounds(), lxp+plotLegendLineLength/2, y, plotMarker, s.color)
		}
		drawText(img, lxp+plotLegendLineLength+10, y+4, s.label, plotBlack)
	}
	return png.Encode(w, img)
}

func nanIfZero(v float64) float64 {
	if v == 0 {
		return math.NaN()
	}
	return v
}

// niceScale rounds v up to a multiple of a 1-2-5 step giving four to ten
// grid lines.
func niceScale(v float64) (top, step float64) {
	if v <= 0 {
		return 1, 0.25
	}
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{0.1, 0.2, 0.25, 0.5, 1, 2} {
		step = m * mag
		if v/step <= 10 {
			break
		}
	}
	return math.Ceil(v/step) * step, step
}

var plotFace = basicfont.Face7x13

func textWidth(s string) int { return font.MeasureString(plotFace, s).Round() }

func drawText(img draw.Image, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: plotFace, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := min(y0, y1); y <= max(y0, y1); y++ {
		img.SetRGBA(x, y, c)
	}
}

func rect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	hline(img, r.Min.X, r.Max.X, r.Min.Y, c)
	hline(img, r.Min.X, r.Max.X, r.Max.Y, c)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, c)
	vline(img, r.Max.X, r.Min.Y, r.Max.Y, c)
}

// square fills a square of half-size h around (x, y), within clip.
func square(img *image.RGBA, clip image.Rectangle, x, y, h int, c color.RGBA) {
	draw.Draw(img, image.Rect(x-h, y-h, x+h+1, y+h+1).Intersect(clip), image.NewUniform(c), image.Point{}, draw.Src)
}

// line draws a thick line from (xa, ya) to (xb, yb) within clip; dashed
// lines alternate 8 pixels on, 6 off.
func line(img *image.RGBA, clip image.Rectangle, xa, ya, xb, yb int, c color.RGBA, dashed bool) {
	n := max(abs(xb-xa), abs(yb-ya), 1)
	for i := 0; i <= n; i++ {
		if dashed && i%14 >= 8 {
			continue
		}
		x := xa + (xb-xa)*i/n
		y := ya + (yb-ya)*i/n
		r := image.Rect(x-plotLineWidth/2, y-plotLineWidth/2, x+plotLineWidth/2+1, y+plotLineWidth/2+1)
		draw.Draw(img, r.Intersect(clip), image.NewUniform(c), image.Point{}, draw.Src)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// plotOverload draws the overload run over time: the goodput (bookings
// answered 201 per second) per 100 ms and over a moving second, against S
// and targetGoodputRatio × S, and the server's admission limit on an axis
// of its own, with the phases' bounds marked.
func plotOverload(w io.Writer, o *overloadRun) error {
	s := o.Series
	n := len(s.Created)
	if n == 0 || s.Bucket <= 0 {
		return fmt.Errorf("plot: no series")
	}
	perSec := float64(time.Second / s.Bucket)
	raw := make([]float64, n)
	moving := make([]float64, n)
	win := int(perSec)
	sum := 0
	for i, c := range s.Created {
		raw[i] = float64(c) * perSec
		sum += c
		if i >= win {
			sum -= s.Created[i-win]
		}
		moving[i] = math.NaN()
		if i >= win-1 {
			moving[i] = float64(sum) * perSec / float64(win)
		}
	}
	yMax := o.Saturated
	for _, v := range raw {
		yMax = max(yMax, v)
	}
	yMax, yStep := niceScale(yMax * 1.05)
	lMax := 0.0
	for _, l := range s.Limit {
		if v := float64(l); !math.IsNaN(v) {
			lMax = max(lMax, v)
		}
	}
	lMax, lStep := niceScale(lMax * 1.1)

	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	x0, x1 := plotLeft, plotW-plotRight
	y0, y1 := plotH-plotBottom, plotTop
	tEnd := float64(n) / perSec
	px := func(sec float64) int { return x0 + int(sec/tEnd*float64(x1-x0)) }
	py := func(v float64) int { return y0 - int(v/yMax*float64(y0-y1)) }
	pl := func(v float64) int { return y0 - int(v/lMax*float64(y0-y1)) }

	for v := 0.0; v <= yMax+yStep/2; v += yStep {
		y := py(v)
		hline(img, x0, x1, y, plotGrid)
		label := fmt.Sprintf("%.0f", v)
		drawText(img, x0-8-textWidth(label), y+4, label, plotBlack)
	}
	limitColor := color.RGBA{0xe0, 0x8a, 0x10, 0xff}
	for v := 0.0; v <= lMax+lStep/2; v += lStep {
		drawText(img, x1+8, pl(v)+4, fmt.Sprintf("%g", v), limitColor)
	}
	_, tStep := niceScale(tEnd)
	for t := 0.0; t <= tEnd+tStep/100; t += tStep {
		x := px(t)
		vline(img, x, y1, y0, plotGrid)
		label := fmt.Sprintf("%g", t)
		drawText(img, x-textWidth(label)/2, y0+18, label, plotBlack)
	}
	hline(img, x0, x1, y0, plotAxis)
	vline(img, x0, y1, y0, plotAxis)
	vline(img, x1, y1, y0, plotAxis)
	drawText(img, x0, y1-10, "bookings answered 201 per second", plotBlack)
	rl := "admission limit"
	drawText(img, x1-textWidth(rl), y1-10, rl, limitColor)
	xl := "seconds from the first phase's start"
	drawText(img, (x0+x1)/2-textWidth(xl)/2, y0+44, xl, plotBlack)
	title := fmt.Sprintf("Atomic Rides: overload, S = %.0f rides/s, N = %d clients", o.Saturated, o.SaturatingClients)
	drawText(img, (x0+x1)/2-textWidth(title)/2, 24, title, plotBlack)

	// The phases' bounds, dashed, each phase named at the top.
	for i, p := range o.Phases {
		x := px(p.Start.Seconds())
		if i > 0 {
			line(img, img.Bounds(), x, y1, x, y0, plotAxis, true)
		}
		drawText(img, x+4, y1+14, asciiText(p.Name), plotBlack)
	}

	clip := image.Rect(x0, y1, x1+1, y0+1)
	series := []struct {
		label  string
		color  color.RGBA
		dashed bool
		y      []float64
		py     func(float64) int
		thin   bool
	}{
		{label: "goodput per 100 ms", color: color.RGBA{0x9c, 0xbc, 0xe8, 0xff}, y: raw, py: py, thin: true},
		{label: "goodput, moving second", color: color.RGBA{0x1f, 0x5f, 0xbf, 0xff}, y: moving, py: py},
		{label: "admission limit", color: limitColor, y: limitValues(s.Limit), py: pl},
	}
	for _, sr := range series {
		for i := 1; i < n; i++ {
			a, b := sr.y[i-1], sr.y[i]
			if math.IsNaN(a) || math.IsNaN(b) {
				continue
			}
			xa, xb := px(float64(i-1)/perSec), px(float64(i)/perSec)
			if sr.thin {
				thinLine(img, clip, xa, sr.py(a), xb, sr.py(b), sr.color)
			} else {
				line(img, clip, xa, sr.py(a), xb, sr.py(b), sr.color, sr.dashed)
			}
		}
	}
	guides := []struct {
		label string
		v     float64
		color color.RGBA
	}{
		{fmt.Sprintf("S = %.0f rides/s", o.Saturated), o.Saturated, color.RGBA{0x90, 0x90, 0x90, 0xff}},
		{fmt.Sprintf("%.2f x S (target)", targetGoodputRatio), targetGoodputRatio * o.Saturated, color.RGBA{0x2a, 0x9d, 0x3a, 0xff}},
	}
	for _, g := range guides {
		line(img, clip, x0, py(g.v), x1, py(g.v), g.color, true)
	}

	// Legend, right of the limit's axis.
	lxp, lyp := x1+56, y1+12
	entries := len(series) + len(guides)
	lw := 0
	for _, sr := range series {
		lw = max(lw, textWidth(sr.label))
	}
	for _, g := range guides {
		lw = max(lw, textWidth(g.label))
	}
	rect(img, image.Rect(lxp-8, lyp-8, lxp+plotLegendLineLength+10+lw+8, lyp+entries*18+2), plotAxis)
	for i, sr := range series {
		y := lyp + i*18 + 6
		line(img, img.Bounds(), lxp, y, lxp+plotLegendLineLength, y, sr.color, sr.dashed)
		drawText(img, lxp+plotLegendLineLength+10, y+4, sr.label, plotBlack)
	}
	for i, g := range guides {
		y := lyp + (len(series)+i)*18 + 6
		line(img, img.Bounds(), lxp, y, lxp+plotLegendLineLength, y, g.color, true)
		drawText(img, lxp+plotLegendLineLength+10, y+4, g.label, plotBlack)
	}
	return png.Encode(w, img)
}

// asciiText is s in the plot's font, which has no "×".
func asciiText(s string) string { return strings.ReplaceAll(s, "×", "x") }

func limitValues(l []jsonFloat) []float64 {
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = float64(v)
	}
	return out
}

// thinLine draws a one-pixel line from (xa, ya) to (xb, yb) within clip.
func thinLine(img *image.RGBA, clip image.Rectangle, xa, ya, xb, yb int, c color.RGBA) {
	n := max(abs(xb-xa), abs(yb-ya), 1)
	for i := 0; i <= n; i++ {
		p := image.Pt(xa+(xb-xa)*i/n, ya+(yb-ya)*i/n)
		if p.In(clip) {
			img.SetRGBA(p.X, p.Y, c)
		}
	}
}
