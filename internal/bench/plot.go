package bench

// Plots of figure-shaped results, drawn with gonum/plot as SVG (fonts
// embedded, so the text looks the same in any viewer) and PNG.

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	plottext "gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figure is one plot: lines over a numeric x axis, or grouped bars over
// categories.
type Figure struct {
	Name       string // file name without extension
	Title      string
	XLabel     string
	YLabel     string
	LogX, LogY bool
	// DecimalX labels a log x axis in powers of ten (counts), not of two
	// (byte sizes).
	DecimalX      bool
	Categories    []string // set for a bar chart: the x axis labels
	Series        []Series
	Width, Height vg.Length // zero: 7 × 4.5 inches
}

// Series is one line or one set of bars.
type Series struct {
	Name   string
	Points []Point
}

// Point is a median with its min–max; X is the x value of a line, or the
// index into Categories of a bar.
type Point struct {
	X, Y, Lo, Hi float64
}

// lineFigure draws results that have an X as lines, one per series(result).
func lineFigure(name, title, xl, yl string, rs []Result, series func(Result) string) Figure {
	f := Figure{Name: name, Title: title, XLabel: xl, YLabel: yl}
	idx := map[string]int{}
	for _, r := range rs {
		if len(r.Samples) == 0 {
			continue
		}
		s := series(r)
		i, ok := idx[s]
		if !ok {
			i = len(f.Series)
			idx[s] = i
			f.Series = append(f.Series, Series{Name: s})
		}
		lo, hi := r.Range()
		f.Series[i].Points = append(f.Series[i].Points, Point{X: r.X, Y: r.Median(), Lo: lo, Hi: hi})
	}
	for i := range f.Series {
		slices.SortFunc(f.Series[i].Points, func(a, b Point) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
	}
	return f
}

// barFigure draws grouped bars: one group per category(result), one bar per
// series(result) in each group.
func barFigure(name, title, yl string, rs []Result, category, series func(Result) string) Figure {
	f := Figure{Name: name, Title: title, YLabel: yl}
	idx := map[string]int{}
	for _, r := range rs {
		if len(r.Samples) == 0 {
			continue
		}
		c := category(r)
		ci := slices.Index(f.Categories, c)
		if ci < 0 {
			ci = len(f.Categories)
			f.Categories = append(f.Categories, c)
		}
		s := series(r)
		i, ok := idx[s]
		if !ok {
			i = len(f.Series)
			idx[s] = i
			f.Series = append(f.Series, Series{Name: s})
		}
		lo, hi := r.Range()
		f.Series[i].Points = append(f.Series[i].Points, Point{X: float64(ci), Y: r.Median(), Lo: lo, Hi: hi})
	}
	return f
}

// save writes NAME.svg and NAME.png into dir and returns their names. A
// figure without data is not drawn.
func (f Figure) save(dir string) ([]string, error) {
	if len(f.Series) == 0 {
		return nil, nil
	}
	p, err := f.plot()
	if err != nil {
		return nil, fmt.Errorf("plot %s: %w", f.Name, err)
	}
	w, h := f.Width, f.Height
	if w == 0 {
		w, h = 8.5*vg.Inch, 4.5*vg.Inch
	}
	svg := vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(true))
	drawWithLegend(p, f.seriesNames(), draw.New(svg))
	if err := writeTo(filepath.Join(dir, f.Name+".svg"), svg); err != nil {
		return nil, err
	}
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	drawWithLegend(p, f.seriesNames(), draw.New(img))
	if err := writeTo(filepath.Join(dir, f.Name+".png"), vgimg.PngCanvas{Canvas: img}); err != nil {
		return nil, err
	}
	return []string{f.Name + ".svg", f.Name + ".png"}, nil
}

// drawWithLegend draws p with its legend in a column to the right of the
// plot, where it never hides data.
func drawWithLegend(p *plot.Plot, names []string, c draw.Canvas) {
	l := p.Legend
	p.Legend = plot.NewLegend()
	defer func() { p.Legend = l }()
	var widest vg.Length
	for _, n := range names {
		widest = max(widest, l.TextStyle.Width(n))
	}
	title := p.Title.Text
	defer func() { p.Title.Text = title }()
	if widest == 0 {
		p.Title.Text = wrapText(p.Title.TextStyle, title, c.Max.X-c.Min.X-2*vg.Millimeter)
		p.Draw(c)
		return
	}
	col := widest + l.ThumbnailWidth + 3*vg.Millimeter
	// The title is centred over the plot, left of the legend: wrapped to
	// that width, or its ends would be cut off.
	p.Title.Text = wrapText(p.Title.TextStyle, title, c.Max.X-c.Min.X-col-2*vg.Millimeter)
	p.Draw(draw.Crop(c, 0, -col, 0, 0))
	l.Top, l.Left = true, true
	l.YOffs = -vg.Millimeter * 8
	l.Draw(draw.Crop(c, c.Max.X-c.Min.X-col+2*vg.Millimeter, 0, 0, 0))
}

// wrapText breaks txt into lines at spaces so that each is at most width
// wide in sty (a single word wider than that stays whole).
func wrapText(sty plottext.Style, txt string, width vg.Length) string {
	var lines []string
	for _, para := range strings.Split(txt, "\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			switch {
			case line == "":
				line = w
			case sty.Width(line+" "+w) <= width:
				line += " " + w
			default:
				lines = append(lines, line)
				line = w
			}
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

func (f Figure) seriesNames() []string {
	var out []string
	for _, s := range f.Series {
		out = append(out, s.Name)
	}
	return out
}

func writeTo(path string, c interface {
	WriteTo(w io.Writer) (int64, error)
}) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (f Figure) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	grid := plotter.NewGrid()
	p.Add(grid)
	p.Y.Tick.Marker = plainTicks{}
	defer f.makeRoom(p)
	if f.Categories != nil {
		grid.Vertical.Width = 0
		return p, f.addBars(p)
	}
	if f.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = powerTicks{}
		if f.DecimalX {
			p.X.Tick.Marker = countTicks{}
		}
	}
	if f.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	for i, s := range f.Series {
		xys := make(plotter.XYs, 0, len(s.Points))
		errsY := make(plotter.YErrors, 0, len(s.Points))
		for _, pt := range s.Points {
			if (f.LogX && pt.X <= 0) || (f.LogY && pt.Lo <= 0) {
				continue // no place on a log axis
			}
			xys = append(xys, plotter.XY{X: pt.X, Y: pt.Y})
			errsY = append(errsY, struct{ Low, High float64 }{pt.Y - pt.Lo, pt.Hi - pt.Y})
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		line.Color = seriesColor(i)
		line.Dashes = plotutil.Dashes(i)
		points.Color = seriesColor(i)
		points.Shape = plotutil.Shape(i)
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{xys, errsY})
		if err != nil {
			return nil, err
		}
		eb.Color = seriesColor(i)
		p.Add(line, points, eb)
		p.Legend.Add(s.Name, line, points)
	}
	return p, nil
}

// addBars draws grouped bars, one colour per series; on a log y axis, where
// a bar has no base, it draws each median as a point with its min–max.
func (f Figure) addBars(p *plot.Plot) error {
	n := len(f.Series)
	if f.LogY {
		return f.addDots(p)
	}
	width := vg.Points(math.Max(4, math.Min(24, 300/float64(n*max(1, len(f.Categories))))))
	for i, s := range f.Series {
		vals := make(plotter.Values, len(f.Categories))
		for _, pt := range s.Points {
			vals[int(pt.X)] = pt.Y
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = seriesColor(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(float64(i)-float64(n-1)/2) * width
		p.Add(bars)
		p.Legend.Add(s.Name, bars)
	}
	p.NominalX(f.Categories...)
	p.Y.Min = 0
	return nil
}

func (f Figure) addDots(p *plot.Plot) error {
	n := len(f.Series)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	for i, s := range f.Series {
		var xys plotter.XYs
		var errsY plotter.YErrors
		for _, pt := range s.Points {
			if pt.Lo <= 0 {
				continue
			}
			x := pt.X + 0.6*(float64(i)-float64(n-1)/2)/float64(max(n, 1))
			xys = append(xys, plotter.XY{X: x, Y: pt.Y})
			errsY = append(errsY, struct{ Low, High float64 }{pt.Y - pt.Lo, pt.Hi - pt.Y})
		}
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		sc.Color = seriesColor(i)
		sc.Shape = plotutil.Shape(i)
		sc.Radius = vg.Points(3.5)
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{xys, errsY})
		if err != nil {
			return err
		}
		eb.Color = seriesColor(i)
		p.Add(sc, eb)
		p.Legend.Add(s.Name, sc)
	}
	p.NominalX(f.Categories...)
	p.X.Min, p.X.Max = -0.5, float64(len(f.Categories))-0.5
	return nil
}

// makeRoom sets the y range to whole decades on a log axis, and from zero
// with a little headroom on a linear one.
func (f Figure) makeRoom(p *plot.Plot) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range f.Series {
		for _, pt := range s.Points {
			if !f.LogY || pt.Lo > 0 {
				lo, hi = math.Min(lo, pt.Lo), math.Max(hi, pt.Hi)
			}
		}
	}
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return
	}
	if f.LogY {
		p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
		return
	}
	p.Y.Min = math.Min(0, lo)
	p.Y.Max = hi * 1.05
}

// palette is Tableau's 10 colours and two more: enough for every target of
// a run to get its own.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0x00, 0x00, 0x80, 0xff}, {0x80, 0x80, 0x00, 0xff},
}

func seriesColor(i int) color.Color { return palette[i%len(palette)] }

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
}

// powerTicks labels a log2 byte axis with powers of two (1, 4, 16 ... 1M).
type powerTicks struct{}

func (powerTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	start := math.Floor(math.Log2(math.Max(lo, 1)))
	step := math.Max(1, math.Ceil((math.Log2(hi)-start)/10))
	for e := start; math.Pow(2, e) <= hi*1.0001; e++ {
		v := math.Pow(2, e)
		t := plot.Tick{Value: v}
		if math.Mod(e-start, step) == 0 {
			t.Label = sizeLabel(v)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// sizeLabel writes a byte count as 512, 4K, 2M, 1G.
func sizeLabel(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%gG", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%gM", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%gK", v/(1<<10))
	default:
		return fmt.Sprintf("%g", v)
	}
}

// countTicks labels a log10 count axis 1, 10, 100, 1k ... 1M.
type countTicks struct{}

func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label == "" {
			continue
		}
		v := ticks[i].Value
		switch {
		case v >= 1e6:
			ticks[i].Label = fmt.Sprintf("%gM", v/1e6)
		case v >= 1e3:
			ticks[i].Label = fmt.Sprintf("%gk", v/1e3)
		default:
			ticks[i].Label = fmt.Sprintf("%g", v)
		}
	}
	return ticks
}
