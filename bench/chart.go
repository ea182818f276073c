package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// panel is one chart: a ratio to the baseline per row.
type panel struct {
	title  string
	metric string
}

// chartPanels are the headline comparisons. Every bar is against the same
// reference, the hand-rolled SET NX PX baseline of the same round, so that
// the four panels read alike (a moving "best peer" reference would put every
// peer at or below 1 by construction).
var chartPanels = []panel{
	{"Uncontended Lock+Release p50 (lower is better)", mUP50},
	{"Hot-key handoff gap p50 (lower is better)", mHHandoff},
	{"Hot-key critical sections/s (higher is better)", mHCS},
	{"Deadline churn acquisitions/s (higher is better)", mChAcq},
}

var (
	colDistlock = color.RGBA{R: 0x1f, G: 0x5f, B: 0xbf, A: 0xff}
	colDistTune = color.RGBA{R: 0x7f, G: 0xa8, B: 0xe6, A: 0xff}
	colPeer     = color.RGBA{R: 0x8c, G: 0x8c, B: 0x8c, A: 0xff}
	colPeerTune = color.RGBA{R: 0xc4, G: 0xc4, B: 0xc4, A: 0xff}
	sansFont    = font.Font{Typeface: "Liberation", Variant: "Sans"}
)

func barColor(r *result) color.Color {
	switch {
	case r.isDistlock() && r.Cfg == "default":
		return colDistlock
	case r.isDistlock():
		return colDistTune
	case r.Cfg == "default":
		return colPeer
	}
	return colPeerTune
}

// replot redraws the chart of a stored run (its results.json) into dir.
func replot(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	return rep.writeChart(dir)
}

// writeChart draws the panels that have data to bench.svg and bench.png.
func (rep *report) writeChart(dir string) error {
	var rows []*result
	for _, r := range rep.Rows {
		if r.Lib != "baseline" {
			rows = append(rows, r)
		}
	}
	var plots []*plot.Plot
	for _, pn := range chartPanels {
		p, ok, err := rep.panelPlot(pn, rows)
		if err != nil {
			return err
		}
		if ok {
			plots = append(plots, p)
		}
	}
	if len(plots) == 0 {
		return nil
	}
	cols := min(2, len(plots))
	grid := make([][]*plot.Plot, (len(plots)+cols-1)/cols)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range cols {
			if k := i*cols + j; k < len(plots) {
				grid[i][j] = plots[k]
			}
		}
	}
	const top = 0.8 * vg.Inch // header
	w, h := vg.Length(cols)*5.6*vg.Inch, vg.Length(len(grid))*4.2*vg.Inch+top
	header := []string{
		"distlock vs peers: ratio to the SET NX PX baseline of the same round",
		fmt.Sprintf("bar: median over %d rounds (uncontended: %d) · whiskers: p25–p75 · dashed line: 1× · blue: distlock, grey: peers · dark: default, light: tuned (1 ms retry)", rep.Rounds, rep.uncontendedRounds()),
		fmt.Sprintf("%s · Redis %s · %d cores · %s%s", rep.Date, rep.Redis, rep.Cores, rep.Go, map[bool]string{true: " · -quick", false: ""}[rep.Quick]),
	}
	render := func(c vg.CanvasWriterTo) vg.CanvasWriterTo {
		dc := draw.New(c)
		hdr := text.Style{Color: color.Black, Font: font.From(sansFont, 13), XAlign: text.XCenter, YAlign: text.YTop, Handler: plot.DefaultTextHandler}
		y := h - 0.1*vg.Inch
		for i, line := range header {
			dc.FillText(hdr, vg.Point{X: w / 2, Y: y}, line)
			y -= hdr.Height(line) + 0.04*vg.Inch
			if i == 0 {
				hdr.Font = font.From(sansFont, 9)
			}
		}
		body := draw.Crop(dc, 0, 0, 0, -top)
		tiles := draw.Tiles{Rows: len(grid), Cols: cols, PadX: 0.25 * vg.Inch, PadY: 0.3 * vg.Inch,
			PadTop: 0.1 * vg.Inch, PadBottom: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.3 * vg.Inch}
		canvases := plot.Align(grid, tiles, body)
		for i := range grid {
			for j := range grid[i] {
				if grid[i][j] != nil {
					grid[i][j].Draw(canvases[i][j])
				}
			}
		}
		return c
	}
	var svg bytes.Buffer
	if _, err := render(vgsvg.New(w, h)).WriteTo(&svg); err != nil {
		return err
	}
	// The SVG names the font it was measured with; Arial and Helvetica have
	// the same metrics, so viewers without Liberation Sans keep the layout.
	out := strings.ReplaceAll(svg.String(), "font-family:Liberation Sans;", "font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")
	if err := os.WriteFile(filepath.Join(dir, "bench.svg"), []byte(out), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "bench.png"))
	if err != nil {
		return err
	}
	defer f.Close()
	png := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))}
	_, err = render(png).WriteTo(f)
	return err
}

// panelPlot is one horizontal bar chart, first row at the top. Bars far
// beyond the others are cut at the axis end and labelled with their value.
func (rep *report) panelPlot(pn panel, rows []*result) (*plot.Plot, bool, error) {
	type bar struct {
		name string
		rs   *ratioStat
		col  color.Color
	}
	var bars []bar
	var medians []float64
	for _, r := range rows {
		rs := r.ratio(pn.metric, refBaseline)
		if rs == nil && r.Lib == "floor" {
			continue // a reference row, only in the uncontended scenario
		}
		bars = append(bars, bar{r.name(), rs, barColor(r)})
		if rs != nil {
			medians = append(medians, rs.Median)
		}
	}
	if len(medians) == 0 {
		return nil, false, nil
	}
	// Axis end: room for every whisker, but at most 4× the typical row so
	// that one outlier does not flatten the rest.
	slices.Sort(medians)
	limit := max(2, 4*medians[len(medians)/2])
	xmax := 1.0
	for _, b := range bars {
		if b.rs != nil {
			xmax = max(xmax, min(b.rs.P75, limit))
		}
	}
	xmax *= 1.18 // room for the labels

	p := plot.New()
	p.Title.Text = pn.title
	p.Title.TextStyle.Font = font.From(sansFont, 11)
	p.X.Label.Text = "× baseline (same round)"
	p.X.Min, p.X.Max = 0, xmax
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sansFont, 9)
		a.Tick.Label.Font = font.From(sansFont, 8)
	}
	n := len(bars)
	// Grid first; the 1× line over the bars; the labels over everything.
	grid := plotter.NewGrid()
	grid.Horizontal.Width = 0
	p.Add(grid)
	ref, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.6}, {X: 1, Y: float64(n) - 0.4}})
	if err != nil {
		return nil, false, err
	}
	ref.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	ref.LineStyle.Color = color.RGBA{R: 0xc0, G: 0x30, B: 0x30, A: 0xff}
	names := make([]string, n)
	var labels plotter.XYLabels
	for i, b := range bars {
		y := float64(n - 1 - i)
		names[n-1-i] = b.name
		if b.rs == nil {
			labels.XYs = append(labels.XYs, plotter.XY{X: 0, Y: y})
			labels.Labels = append(labels.Labels, "no data")
			continue
		}
		v := min(b.rs.Median, xmax/1.18)
		bc, err := plotter.NewBarChart(plotter.Values{v}, 0.22*vg.Inch)
		if err != nil {
			return nil, false, err
		}
		bc.Horizontal, bc.XMin, bc.Color = true, y, b.col
		bc.LineStyle.Width = 0
		p.Add(bc)
		lo, hi := min(b.rs.P25, xmax/1.18), min(b.rs.P75, xmax/1.18)
		eb, err := plotter.NewXErrorBars(struct {
			plotter.XYs
			plotter.XErrors
		}{plotter.XYs{{X: v, Y: y}}, plotter.XErrors{{Low: v - lo, High: hi - v}}})
		if err != nil {
			return nil, false, err
		}
		eb.CapWidth = 0.1 * vg.Inch
		p.Add(eb)
		label := num(b.rs.Median) + "×"
		if b.rs.Median > v {
			label = "> " + label
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: max(v, hi), Y: y})
		labels.Labels = append(labels.Labels, label)
	}
	lb, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, false, err
	}
	lb.Offset = vg.Point{X: 4} // SVG viewers drop leading spaces: keep the gap here
	for i := range lb.TextStyle {
		lb.TextStyle[i].Font = font.From(sansFont, 8)
		lb.TextStyle[i].YAlign = text.YCenter
	}
	p.Add(ref, lb)
	p.NominalY(names...)
	return p, true, nil
}
