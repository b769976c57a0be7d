//! Plots with plotters, as PNG or SVG (chosen by the file extension): speedup versus GPU count with
//! the ideal line, stacked time-breakdown bars, a Gantt chart of one iteration, and
//! predicted-versus-measured scatter. Counts and ratios go on log axes labelled with powers, charts
//! with many series are split into panels, and legends sit beside the data, never on it. Text is drawn with the DejaVu Sans font compiled into the
//! binary (assets/), so no system fonts are needed. Takes plain data (and, for the Gantt chart, a
//! finished run); never simulates. Files are written atomically.

use super::critical::critical_path;
use crate::dag::{Dag, Phase, Work};
use crate::error::{Error, Result};
use crate::sim::Run;
use crate::units::Nanos;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

const FONT: &str = "sans-serif";
const FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            // The font is compiled in and known to parse; a failure here is a build defect.
            let ok = plotters::style::register_font(FONT, style, FONT_BYTES).is_ok();
            assert!(ok, "the bundled font parses");
        }
    });
}

/// One line of a speedup chart: (GPU count, speedup) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// One stacked bar: a label and seconds of [compute, communication, I/O, idle].
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub seconds: [f64; 4],
}

/// One row of a Gantt chart: spans as (start ns, end ns, phase, on the critical path).
#[derive(Debug, Clone, PartialEq)]
pub struct GanttRow {
    pub label: String,
    pub spans: Vec<(Nanos, Nanos, Phase, bool)>,
}

/// One point of a predicted-versus-measured scatter: `series` picks its colour and marker,
/// `hollow` marks a row the user already knows the model misses, `label` is written beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterPoint {
    pub measured: f64,
    pub predicted: f64,
    pub series: usize,
    pub hollow: bool,
    pub label: Option<String>,
}

/// One panel of a scatter: a metric and its unit, the series shown in it (index as in
/// [`ScatterPoint::series`], so a series keeps its colour across panels; name) and its points.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterPanel {
    pub title: String,
    pub unit: String,
    pub series: Vec<(usize, String)>,
    pub points: Vec<ScatterPoint>,
}

const CATEGORY_NAMES: [&str; 4] = ["compute", "communication", "I/O", "idle"];
const CATEGORY_COLORS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(200, 200, 200)];

fn phase_color(p: Phase) -> RGBColor {
    match p {
        Phase::Io => RGBColor(44, 160, 44),
        Phase::HostToDevice => RGBColor(152, 223, 138),
        Phase::Forward => RGBColor(31, 119, 180),
        Phase::Backward => RGBColor(255, 127, 14),
        Phase::GradientAggregation => RGBColor(214, 39, 40),
        Phase::Update => RGBColor(148, 103, 189),
        Phase::PeerToPeer => RGBColor(23, 190, 207),
        Phase::WeightBroadcast => RGBColor(227, 119, 194),
        Phase::ModelParallelExchange => RGBColor(140, 86, 75),
        Phase::LossExchange => RGBColor(188, 189, 34),
        Phase::Codec => RGBColor(127, 127, 127),
        Phase::Coordination => RGBColor(255, 152, 150),
        Phase::ServerReduce => RGBColor(197, 176, 213),
        Phase::TensorParallel => RGBColor(219, 219, 141),
        Phase::ExpertParallel => RGBColor(158, 218, 229),
        Phase::ContextParallel => RGBColor(199, 199, 199),
        Phase::PipelineTransfer => RGBColor(196, 156, 148),
        Phase::ParamGather => RGBColor(247, 182, 210),
        Phase::Host => RGBColor(255, 187, 120),
    }
}

/// Distinct line colours (the "tab10" set), repeated after ten series.
fn series_color(i: usize) -> RGBColor {
    const TAB10: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    TAB10[i % TAB10.len()]
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Renders `draw` to `path` as PNG or SVG (by extension), atomically.
fn render(
    path: &Path,
    size: (u32, u32),
    draw: impl Fn(DrawingArea<SVGBackend, Shift>) -> DrawResult + Copy,
    draw_png: impl Fn(DrawingArea<BitMapBackend, Shift>) -> DrawResult,
) -> Result<()> {
    register_font();
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let fail = |e: Box<dyn std::error::Error>| Error::invalid(format!("plot {}", path.display()), e.to_string());
    match ext.as_deref() {
        Some("svg") => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                draw(root).map_err(fail)?;
            }
            crate::atomic_file::write_atomically(path, |w| w.write_all(svg.as_bytes()))
        }
        // The bitmap backend picks the encoder from the extension, so the temporary file keeps it.
        Some("png") => crate::atomic_file::write_via_path(path, ".png", |tmp| {
            let root = BitMapBackend::new(tmp, size).into_drawing_area();
            draw_png(root).map_err(fail)
        }),
        _ => Err(Error::invalid(
            format!("plot file {}", path.display()),
            "the name must end in .png or .svg (that picks the format)",
        )),
    }
}

/// A chart with one labelled row per entry of `labels` (top to bottom) over x in `0..x_max`: row
/// `i` sits at y = `labels.len() - 1 - i`. Used by the breakdown bars and the Gantt chart.
fn row_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    caption_size: u32,
    labels: &[&str],
    x_max: f64,
    x_desc: &str,
) -> std::result::Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let n = labels.len();
    // DejaVu Sans at 13 px averages under 7 px a character.
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(4) as u32 * 7 + 20;
    let mut builder = ChartBuilder::on(area);
    if !title.is_empty() {
        builder.caption(title, (FONT, caption_size));
    }
    let mut chart = builder
        .margin(15)
        .margin_right(45)
        .x_label_area_size(45)
        .y_label_area_size(label_width.min(600))
        .build_cartesian_2d(0.0..x_max, -0.5..n as f64 - 0.5)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n.max(1))
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                labels[n - 1 - i as usize].to_string()
            } else {
                String::new()
            }
        })
        .x_labels(8)
        .x_label_formatter(&|x| axis_number(*x))
        .x_desc(x_desc)
        .label_style((FONT, 13))
        .draw()?;
    Ok(chart)
}

/// A tick label with as many decimals as its magnitude needs (no `2000.0` beside `4000.0`).
fn axis_number(x: f64) -> String {
    match x.abs() {
        a if a >= 100.0 || a == 0.0 => format!("{x:.0}"),
        a if a >= 1.0 => format!("{x:.1}"),
        _ => format!("{x:.3}"),
    }
}

/// Draws a one-line legend of coloured boxes into its own strip, so it never hides data.
fn legend_strip<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[(String, ShapeStyle)]) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let mut x = 120;
    for (name, style) in entries {
        area.draw(&Rectangle::new([(x, 12), (x + 14, 26)], *style))?;
        area.draw(&Text::new(name.clone(), (x + 20, 12), (FONT, 14)))?;
        x += 40 + 8 * name.chars().count() as i32;
    }
    Ok(())
}

/// Generates the two monomorphised renderers of one chart function.
macro_rules! render_with {
    ($path:expr, $size:expr, $f:expr) => {
        render($path, $size, |root| $f(root), |root| $f(root))
    };
}

/// Speedup versus GPU count on log-2 axes (so the ideal line is the diagonal and equal gaps are
/// equal efficiency losses), one panel per entry of `panels` (each with at most
/// [`MAX_SERIES_PER_PANEL`] lines, its legend in a column to the right of its data).
pub fn speedup_chart(path: &Path, title: &str, panels: &[Panel]) -> Result<()> {
    let (cols, rows) = facet_grid(panels.len());
    let size = (PANEL_SIZE.0 * cols, PANEL_SIZE.1 * rows + 50);
    render_with!(path, size, |root| draw_speedup(root, title, panels, cols))
}

fn draw_speedup<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
    cols: u32,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let areas = titled_grid(&root, title, panels.len(), cols)?;
    for (panel, area) in panels.iter().zip(&areas) {
        // Log axes cannot show zero: such points (no GPUs, a stalled run) are left out.
        let points = || panel.series.iter().flat_map(|s| s.points.iter().copied()).filter(|p| p.0 > 0.0 && p.1 > 0.0);
        let max_x = points().map(|p| p.0).fold(1.0, f64::max);
        let (lo_y, hi_y) = points().fold((1.0f64, max_x), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
        let lo_y = speedup_axis_floor(lo_y);
        let x_axis = LogAxis { powers_only: true, ..LogAxis::new(2.0, 1.0, max_x) };
        let y_axis = LogAxis::new(2.0, lo_y, hi_y);
        let entries: Vec<LegendEntry> = std::iter::once(LegendEntry::dashed("ideal", BLACK))
            .chain(panel.series.iter().enumerate().map(|(i, s)| LegendEntry::line(&s.label, i)))
            .collect();
        let (plot, legend) = split_legend(area, &entries);
        let descs = ("GPUs (log-2 scale)".to_string(), "speedup over 1 GPU (x, log-2 scale)".to_string());
        let mut chart = log_log_frame(&plot, &panel.title, (&x_axis, &y_axis), descs)?;
        let l2 = f64::log2;
        chart.draw_series(DashedLineSeries::new([(0.0, 0.0), (l2(max_x), l2(max_x))], 8, 6, BLACK.stroke_width(1)))?;
        for (i, s) in panel.series.iter().enumerate() {
            let color = series_color(i);
            // Earlier lines are wider, so a line hidden under an identical later one still shows.
            let width = 2 + (panel.series.len() - 1 - i).min(3) as u32;
            let pts: Vec<(f64, f64)> =
                s.points.iter().filter(|p| p.0 > 0.0 && p.1 > 0.0).map(|&(x, y)| (l2(x), l2(y))).collect();
            chart.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(width)))?;
            for &p in &pts {
                draw_marker(chart.plotting_area(), p, i)?;
            }
        }
        draw_legend(&legend, &entries)?;
    }
    root.present()?;
    Ok(())
}

/// A log-log chart per panel of a cost against GPU count (`dagsim bench --scaling`: wall seconds
/// and peak memory), each panel with its own y axis named by its title; base-10 axes over wide
/// spans, base 2 otherwise.
pub fn loglog_chart(path: &Path, title: &str, panels: &[(Panel, String)]) -> Result<()> {
    let (cols, rows) = facet_grid(panels.len());
    let size = (PANEL_SIZE.0 * cols, PANEL_SIZE.1 * rows + 50);
    render_with!(path, size, |root| draw_loglog(root, title, panels, cols))
}

fn draw_loglog<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    panels: &[(Panel, String)],
    cols: u32,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let areas = titled_grid(&root, title, panels.len(), cols)?;
    for ((panel, y_desc), area) in panels.iter().zip(&areas) {
        let points = || panel.series.iter().flat_map(|s| s.points.iter().copied()).filter(|p| p.0 > 0.0 && p.1 > 0.0);
        let (lo_x, hi_x) = points().fold((f64::MAX, 1.0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
        let (lo_y, hi_y) = points().fold((f64::MAX, 1e-12f64), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
        let x_axis = LogAxis { powers_only: true, ..LogAxis::fitting(lo_x.min(hi_x), hi_x) };
        let y_axis = LogAxis::fitting(lo_y.min(hi_y), hi_y);
        let entries: Vec<LegendEntry> =
            panel.series.iter().enumerate().map(|(i, s)| LegendEntry::line(&s.label, i)).collect();
        let (plot, legend) = split_legend(area, &entries);
        let descs = (format!("GPUs ({})", x_axis.scale_name()), format!("{y_desc} ({})", y_axis.scale_name()));
        let mut chart = log_log_frame(&plot, &panel.title, (&x_axis, &y_axis), descs)?;
        for (i, s) in panel.series.iter().enumerate() {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.0 > 0.0 && p.1 > 0.0)
                .map(|&(x, y)| (x_axis.at(x), y_axis.at(y)))
                .collect();
            chart.draw_series(LineSeries::new(pts.iter().copied(), series_color(i).stroke_width(2)))?;
            for &p in &pts {
                draw_marker(chart.plotting_area(), p, i)?;
            }
        }
        draw_legend(&legend, &entries)?;
    }
    root.present()?;
    Ok(())
}

/// A chart whose coordinates are log values (see [`LogAxis::at`]).
type LogLogChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A panel's chart on log axes (values already mapped by the axes' `at`): its caption, the
/// axes' labels and descriptions (x, y), drawn; the caller adds the series.
fn log_log_frame<'a, DB: DrawingBackend>(
    plot: &'a DrawingArea<DB, Shift>,
    title: &str,
    (x_axis, y_axis): (&LogAxis, &LogAxis),
    (x_desc, y_desc): (String, String),
) -> std::result::Result<LogLogChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>>
where
    DB::ErrorType: 'static,
{
    let mut builder = ChartBuilder::on(plot);
    builder.margin(10).x_label_area_size(45).y_label_area_size(60);
    if !title.is_empty() {
        builder.caption(title, (FONT, 16));
    }
    let mut chart = builder.build_cartesian_2d(x_axis.range(), y_axis.range())?;
    chart
        .configure_mesh()
        .x_labels(x_axis.label_count())
        .y_labels(y_axis.label_count())
        .x_label_formatter(&|v| x_axis.label(*v))
        .y_label_formatter(&|v| y_axis.label(*v))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FONT, 14))
        .draw()?;
    Ok(chart)
}

/// The bottom of a speedup axis whose slowest point is `lo` (at most 1): down to the power of two
/// below it, so a run slower than one GPU (speedup 0.6) sits above a labelled tick (0.5), not below
/// the lowest label (1); a point just under a power (0.98) reads against that power's label.
fn speedup_axis_floor(lo: f64) -> f64 {
    let e = lo.log2();
    if e - e.floor() < 0.8 {
        2f64.powf(e.floor())
    } else {
        lo
    }
}

/// Horizontal stacked bars of where an iteration's time goes (ScaleDNN Fig. 3 style), one panel
/// per `(title, bars)` entry stacked top to bottom, each with its own time axis (so a fast
/// workload's bars are not lost beside a slow one's).
pub fn breakdown_chart(path: &Path, title: &str, panels: &[(String, Vec<Bar>)]) -> Result<()> {
    let heights: Vec<u32> = panels.iter().map(|(_, bars)| 110 + 28 * bars.len().max(1) as u32).collect();
    let height = 90 + heights.iter().sum::<u32>();
    render_with!(path, (1000, height), |root| draw_breakdown(root, title, panels, &heights))
}

fn draw_breakdown<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    panels: &[(String, Vec<Bar>)],
    heights: &[u32],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let height = root.dim_in_pixel().1 as i32;
    let (root, legend) = root.split_vertically(height - 40);
    let root = root.titled(title, (FONT, 24))?;
    let mut rest = root;
    for ((panel_title, bars), &h) in panels.iter().zip(heights) {
        let (area, below) = rest.split_vertically(h as i32);
        rest = below;
        let max_x = bars.iter().map(|b| b.seconds.iter().sum::<f64>()).fold(0.0, f64::max).max(1e-9) * 1000.0;
        let n = bars.len();
        let labels: Vec<&str> = bars.iter().map(|b| b.label.as_str()).collect();
        let mut chart = row_chart(&area, panel_title, 17, &labels, max_x * 1.05, "time per iteration (ms)")?;
        for (c, &color) in CATEGORY_COLORS.iter().enumerate() {
            chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
                let y = (n - 1 - i) as f64;
                let x0: f64 = b.seconds[..c].iter().sum::<f64>() * 1000.0;
                let x1 = x0 + b.seconds[c] * 1000.0;
                Rectangle::new([(x0, y - 0.35), (x1, y + 0.35)], color.filled())
            }))?;
        }
    }
    let entries: Vec<(String, ShapeStyle)> =
        CATEGORY_NAMES.iter().zip(&CATEGORY_COLORS).map(|(n, c)| (n.to_string(), c.filled())).collect();
    legend_strip(&legend, &entries)?;
    legend.present()?;
    Ok(())
}

/// The rows of a Gantt chart of iteration `iteration` in steady state: the window from the end of
/// the previous iteration to the end of this one, with every span in it clipped to it (so batches
/// prefetched for the next iteration show too). Per GPU, one row per serial queue and per copy
/// engine/reader; group tasks (collectives) appear on every member GPU's row. Returns the window
/// and the rows.
pub fn gantt_rows(dag: &Dag, run: &Run, iteration: u32) -> ((Nanos, Nanos), Vec<GanttRow>) {
    let ends = super::iteration_ends(dag, run);
    let i = (iteration as usize).min(ends.len().saturating_sub(1));
    let window = (if i == 0 { 0 } else { ends[i - 1] }, ends.get(i).copied().unwrap_or(run.makespan));
    let critical = critical_path(dag, run);
    let mut on_path = vec![false; dag.len()];
    for &t in &critical {
        on_path[t as usize] = true;
    }
    let mut rows: std::collections::BTreeMap<(u32, u32), GanttRow> = std::collections::BTreeMap::new();
    for (t, task) in dag.tasks().iter().enumerate() {
        let (s, e) = (run.start[t].max(window.0), run.end[t].min(window.1));
        if s > e || (s == e && run.start[t] != run.end[t]) {
            continue;
        }
        let gpus: Vec<u32> = match (task.gpu, task.work) {
            (Some(g), _) => vec![g],
            (None, Work::Collective { group, .. }) => dag.group(group).to_vec(),
            (None, _) => vec![0],
        };
        // Rows sort by GPU, then I/O before H2D before queues.
        let (order, track) = match (task.queue, task.phase) {
            (Some(q), _) => {
                let name = &dag.queues()[q as usize].name;
                (10 + q, name.split_once('.').map_or(name.as_str(), |(_, r)| r).to_string())
            }
            (None, Phase::Io) => (0, "read".to_string()),
            (None, Phase::HostToDevice) => (1, "H2D".to_string()),
            (None, p) => (5, p.name().to_string()),
        };
        for g in gpus {
            rows.entry((g, order))
                .or_insert_with(|| GanttRow { label: format!("GPU {g} {track}"), spans: Vec::new() })
                .spans
                .push((s, e, task.phase, on_path[t]));
        }
    }
    (window, rows.into_values().collect())
}

/// A Gantt chart over `window`: one row per track, spans coloured by phase, critical-path spans
/// outlined, the legend in a strip below. Times are shown in ms from the window's start.
pub fn gantt_chart(path: &Path, title: &str, window: (Nanos, Nanos), rows: &[GanttRow]) -> Result<()> {
    let height = 190 + 22 * rows.len().max(1) as u32;
    render_with!(path, (1200, height), |root| draw_gantt(root, title, window, rows))
}

fn draw_gantt<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    window: (Nanos, Nanos),
    rows: &[GanttRow],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (t0, t1) = (window.0, window.1.max(window.0 + 1));
    let height = root.dim_in_pixel().1 as i32;
    let (root, legend) = root.split_vertically(height - 40);
    let ms = |t: Nanos| (t - t0) as f64 / 1e6;
    let n = rows.len();
    let labels: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    let mut chart = row_chart(&root, title, 24, &labels, ms(t1), "time since the iteration started (ms)")?;
    for (i, row) in rows.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        chart.draw_series(
            row.spans
                .iter()
                .map(|&(s, e, p, _)| Rectangle::new([(ms(s), y - 0.38), (ms(e), y + 0.38)], phase_color(p).filled())),
        )?;
        chart.draw_series(
            row.spans
                .iter()
                .filter(|s| s.3)
                .map(|&(s, e, _, _)| Rectangle::new([(ms(s), y - 0.42), (ms(e), y + 0.42)], BLACK.stroke_width(2))),
        )?;
    }
    let entries: Vec<(String, ShapeStyle)> =
        [Phase::Io, Phase::HostToDevice, Phase::Forward, Phase::Backward, Phase::GradientAggregation, Phase::Update]
            .iter()
            .map(|&p| (p.name().to_string(), phase_color(p).filled()))
            .chain([("critical path (outlined)".to_string(), BLACK.stroke_width(2))])
            .collect();
    legend_strip(&legend, &entries)?;
    root.present()?;
    Ok(())
}

/// Predicted versus measured on log-2 axes, one panel per metric: the y = x line, a shaded band
/// for the first of `bands` (relative errors, e.g. 0.10 for +-10%) and dashed lines for the
/// others, points coloured by series. Above the diagonal the prediction is the larger value.
pub fn scatter_chart(path: &Path, title: &str, panels: &[ScatterPanel], bands: &[f64]) -> Result<()> {
    let (cols, rows) = facet_grid(panels.len());
    let size = (PANEL_SIZE.0 * cols, PANEL_SIZE.0 * 7 / 10 * rows + 50);
    render_with!(path, size, |root| draw_scatter(root, title, panels, bands, cols))
}

fn draw_scatter<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    panels: &[ScatterPanel],
    bands: &[f64],
    cols: u32,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let areas = titled_grid(&root, title, panels.len(), cols)?;
    let band_color = RGBColor(120, 120, 120);
    for (panel, area) in panels.iter().zip(&areas) {
        let values = panel.points.iter().flat_map(|p| [p.measured, p.predicted]).filter(|v| v.is_finite() && *v > 0.0);
        let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let axis = if hi > 0.0 { LogAxis::fitting(lo, hi) } else { LogAxis::new(2.0, 1.0, 2.0) };
        let mut entries = vec![LegendEntry::dashed("predicted = measured", BLACK)];
        for (i, b) in bands.iter().enumerate() {
            let label = format!("error within ±{}%", b * 100.0);
            entries.push(if i == 0 {
                LegendEntry::band(&label, band_color)
            } else {
                LegendEntry::dashed(&label, band_color)
            });
        }
        entries.extend(panel.series.iter().map(|(i, s)| LegendEntry::marker(s, *i)));
        if panel.points.iter().any(|p| p.hollow) {
            entries.push(LegendEntry::hollow("hollow: known miss"));
        }
        let (plot, legend) = split_legend(area, &entries);
        let mut builder = ChartBuilder::on(&plot);
        builder.caption(&panel.title, (FONT, 16)).margin(10).x_label_area_size(45).y_label_area_size(60);
        let mut chart = builder.build_cartesian_2d(axis.range(), axis.range())?;
        chart
            .configure_mesh()
            .x_labels(axis.label_count())
            .y_labels(axis.label_count())
            .x_label_formatter(&|v| axis.label(*v))
            .y_label_formatter(&|v| axis.label(*v))
            .x_desc(format!("measured ({}, {})", panel.unit, axis.scale_name()))
            .y_desc(format!("predicted ({}, {})", panel.unit, axis.scale_name()))
            .label_style((FONT, 14))
            .draw()?;
        let (a, b) = (axis.range().start, axis.range().end);
        for (i, &band) in bands.iter().enumerate() {
            let up = axis.at(1.0 + band);
            let down = if band < 1.0 { axis.at(1.0 - band) } else { a - b };
            if i == 0 {
                let shape = vec![(a, a + down), (b, b + down), (b, b + up), (a, a + up)];
                chart.draw_series([Polygon::new(shape, band_color.mix(0.18))])?;
            } else {
                for off in [up, down] {
                    chart.draw_series(DashedLineSeries::new(
                        [(a, a + off), (b, b + off)],
                        5,
                        5,
                        band_color.stroke_width(1),
                    ))?;
                }
            }
        }
        chart.draw_series(DashedLineSeries::new([(a, a), (b, b)], 8, 6, BLACK.stroke_width(1)))?;
        let area = chart.plotting_area();
        let (xs, ys) = area.get_pixel_range();
        let mut placed = LabelPlacer::new((xs.start, xs.end), (ys.start, ys.end));
        for p in panel.points.iter().filter(|p| p.measured > 0.0 && p.predicted > 0.0) {
            let at = (axis.at(p.measured), axis.at(p.predicted));
            if p.hollow {
                area.draw(&Circle::new(at, 5, series_color(p.series).stroke_width(2)))?;
            } else {
                draw_marker(area, at, p.series)?;
            }
            placed.avoid_point(chart.backend_coord(&at));
        }
        // Labels after every marker, each where it overlaps no other label, marker or the panel's
        // edge; one that fits nowhere is left out (the report lists every row).
        for p in panel.points.iter().filter(|p| p.measured > 0.0 && p.predicted > 0.0) {
            let Some(l) = &p.label else { continue };
            let at = (axis.at(p.measured), axis.at(p.predicted));
            if let Some(offset) = placed.place(chart.backend_coord(&at), l) {
                area.draw(&(EmptyElement::at(at) + Text::new(l.clone(), offset, (FONT, 12))))?;
            }
        }
        draw_legend(&legend, &entries)?;
    }
    root.present()?;
    Ok(())
}

/// Places point labels (12-pixel text) beside their points where they overlap nothing placed yet
/// (labels, markers) and stay inside the plotting area.
struct LabelPlacer {
    x: (i32, i32),
    y: (i32, i32),
    /// Occupied boxes in pixels: (left, top, right, bottom).
    boxes: Vec<(i32, i32, i32, i32)>,
}

impl LabelPlacer {
    /// Width of one character of the 12-pixel font, in pixels (a little over its mean advance).
    const CHAR_PX: i32 = 7;
    const HEIGHT_PX: i32 = 13;

    fn new(x: (i32, i32), y: (i32, i32)) -> Self {
        LabelPlacer { x, y, boxes: Vec::new() }
    }

    fn avoid_point(&mut self, (px, py): (i32, i32)) {
        self.boxes.push((px - 5, py - 5, px + 5, py + 5));
    }

    /// The offset (from the point, in pixels) of the label's top-left corner, or None if no
    /// position beside the point is free.
    fn place(&mut self, (px, py): (i32, i32), label: &str) -> Option<(i32, i32)> {
        let w = Self::CHAR_PX * label.chars().count() as i32;
        let h = Self::HEIGHT_PX;
        let candidates = [(7, -h - 1), (7, 2), (-w - 7, -h - 1), (-w - 7, 2), (-w / 2, -h - 8), (-w / 2, 8)];
        for (dx, dy) in candidates {
            let b = (px + dx, py + dy, px + dx + w, py + dy + h);
            let inside = b.0 >= self.x.0 && b.2 <= self.x.1 && b.1 >= self.y.0 && b.3 <= self.y.1;
            let free = self.boxes.iter().all(|o| b.2 <= o.0 || o.2 <= b.0 || b.3 <= o.1 || o.3 <= b.1);
            if inside && free {
                self.boxes.push(b);
                return Some((dx, dy));
            }
        }
        None
    }
}

/// A panel of a faceted chart: its own title and at most [`MAX_SERIES_PER_PANEL`] series.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

/// Lines per panel beyond which a chart is split into panels: past six, colours and markers start
/// to look alike and the legend outgrows the data.
pub const MAX_SERIES_PER_PANEL: usize = 6;

/// Pixels of one panel, legend included.
const PANEL_SIZE: (u32, u32) = (900, 520);

/// Fills `root` white, writes `title` on top and splits the rest into the panel grid's areas
/// (`cols` from [`facet_grid`]).
fn titled_grid<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: usize,
    cols: u32,
) -> std::result::Result<Vec<DrawingArea<DB, Shift>>, DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let root = root.titled(title, (FONT, 24))?;
    Ok(root.split_evenly((panels.div_ceil(cols as usize).max(1), cols as usize)))
}

/// Columns and rows of the panel grid: one column for one panel, two beyond.
fn facet_grid(panels: usize) -> (u32, u32) {
    let cols = if panels <= 1 { 1 } else { 2 };
    (cols, panels.max(1).div_ceil(cols as usize) as u32)
}

/// A logarithmic axis drawn as a linear axis of exponents, labelled with the powers of its base:
/// plotters' own log scale puts its ticks at decimal values, and GPU counts are powers of two.
#[derive(Debug, Clone, Copy)]
struct LogAxis {
    base: f64,
    lo: f64,
    hi: f64,
    /// Label only whole powers, however short the axis (GPU counts: no "0.87 GPUs").
    powers_only: bool,
}

impl LogAxis {
    /// The axis over `min..=max` (positive values), padded a little, at least one step of the
    /// base long.
    fn new(base: f64, min: f64, max: f64) -> Self {
        let (mut lo, mut hi) = (min.max(1e-12).log(base), max.max(min).max(1e-12).log(base));
        if hi - lo < 1.0 {
            let mid = (lo + hi) / 2.0;
            (lo, hi) = (mid - 0.5, mid + 0.5);
        }
        let pad = (0.05 * (hi - lo)).min(0.25);
        LogAxis { base, lo: lo - pad, hi: hi + pad, powers_only: false }
    }

    /// Base 2 unless the values span more than two decades, then base 10 (fewer, rounder labels).
    fn fitting(min: f64, max: f64) -> Self {
        Self::new(if max > 100.0 * min { 10.0 } else { 2.0 }, min, max)
    }

    fn at(&self, v: f64) -> f64 {
        v.log(self.base)
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }

    fn scale_name(&self) -> &'static str {
        if self.base == 10.0 {
            "log scale"
        } else {
            "log-2 scale"
        }
    }

    /// Short axes (under two steps) also label fractional exponents; long ones only powers.
    fn fractional(&self) -> bool {
        !self.powers_only && self.hi - self.lo < 2.0
    }

    /// How many labels to ask plotters for: one per power up to 12, so the step is one power.
    fn label_count(&self) -> usize {
        if self.fractional() {
            6
        } else {
            ((self.hi - self.lo).ceil() as usize + 1).min(12)
        }
    }

    fn label(&self, exponent: f64) -> String {
        if (exponent - exponent.round()).abs() < 1e-6 {
            let value = self.base.powf(exponent.round());
            match value {
                v if v >= 1e9 => format!("{}G", v / 1e9),
                v if v >= 1e6 && self.base == 10.0 => format!("{}M", v / 1e6),
                v if v >= 1e4 && self.base == 10.0 => format!("{}k", v / 1e3),
                v if v >= 1.0 => format!("{v:.0}"),
                v if self.base == 10.0 => format!("{v:.prec$}", prec = (-exponent.round()) as usize),
                v => format!("{v}"),
            }
        } else if self.fractional() {
            match self.base.powf(exponent) {
                v if v >= 100.0 => format!("{v:.0}"),
                v if v >= 10.0 => format!("{v:.1}"),
                v => format!("{v:.2}"),
            }
        } else {
            String::new()
        }
    }
}

/// What a legend entry shows beside its text.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    /// Series `i`'s line and marker.
    Line(usize),
    /// Series `i`'s marker alone.
    Marker(usize),
    /// An unfilled marker.
    Hollow,
    Dashed(RGBColor),
    Band(RGBColor),
}

struct LegendEntry {
    /// Wrapped to fit the legend column.
    lines: Vec<String>,
    swatch: Swatch,
}

/// Characters per legend line before wrapping at a space.
const LEGEND_CHARS: usize = 34;

impl LegendEntry {
    fn new(label: &str, swatch: Swatch) -> Self {
        let mut lines: Vec<String> = Vec::new();
        for word in label.split(' ') {
            match lines.last_mut() {
                Some(l) if l.chars().count() + 1 + word.chars().count() <= LEGEND_CHARS => {
                    l.push(' ');
                    l.push_str(word);
                }
                _ => lines.push(word.to_string()),
            }
        }
        LegendEntry { lines, swatch }
    }
    fn line(label: &str, series: usize) -> Self {
        Self::new(label, Swatch::Line(series))
    }
    fn marker(label: &str, series: usize) -> Self {
        Self::new(label, Swatch::Marker(series))
    }
    fn hollow(label: &str) -> Self {
        Self::new(label, Swatch::Hollow)
    }
    fn dashed(label: &str, color: RGBColor) -> Self {
        Self::new(label, Swatch::Dashed(color))
    }
    fn band(label: &str, color: RGBColor) -> Self {
        Self::new(label, Swatch::Band(color))
    }
}

/// Splits a panel into the data area and a legend column on its right, as wide as the longest
/// legend line needs, so the legend never hides data.
fn split_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let chars = entries.iter().flat_map(|e| e.lines.iter().map(|l| l.chars().count())).max().unwrap_or(4);
    let width = (chars as i32 * 8 + 50).clamp(100, 340);
    let total = area.dim_in_pixel().0 as i32;
    area.split_horizontally(total - width)
}

fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[LegendEntry]) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let mut y = 44;
    for e in entries {
        let mid = y + 8;
        match e.swatch {
            Swatch::Line(i) => {
                area.draw(&PathElement::new([(4, mid), (32, mid)], series_color(i).stroke_width(3)))?;
                draw_marker(area, (18, mid), i)?;
            }
            Swatch::Marker(i) => draw_marker(area, (18, mid), i)?,
            Swatch::Hollow => area.draw(&Circle::new((18, mid), 5, BLACK.stroke_width(2)))?,
            Swatch::Dashed(c) => {
                for x in [4, 16, 28] {
                    area.draw(&PathElement::new([(x, mid), (x + 6, mid)], c.stroke_width(1)))?;
                }
            }
            Swatch::Band(c) => area.draw(&Rectangle::new([(4, mid - 6), (32, mid + 6)], c.mix(0.18).filled()))?,
        }
        for (k, line) in e.lines.iter().enumerate() {
            area.draw(&Text::new(line.clone(), (40, y + 17 * k as i32), (FONT, 13)))?;
        }
        y += 17 * e.lines.len() as i32 + 8;
    }
    Ok(())
}

/// Series `i`'s marker: circle, triangle or cross in turn, so lines of similar colour or lines on
/// top of each other stay apart.
fn draw_marker<DB: DrawingBackend, CT: CoordTranslate>(area: &DrawingArea<DB, CT>, at: CT::From, i: usize) -> DrawResult
where
    DB::ErrorType: 'static,
    CT::From: Clone + 'static,
{
    let color = series_color(i);
    match i % 3 {
        0 => area.draw(&Circle::new(at, 4, color.filled()))?,
        1 => area.draw(&TriangleMarker::new(at, 6, color.filled()))?,
        _ => area.draw(&Cross::new(at, 5, color.stroke_width(2)))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{speedup_axis_floor, LabelPlacer, LogAxis};

    #[test]
    fn scatter_labels_never_overlap_and_stay_inside() {
        let mut p = LabelPlacer::new((0, 400), (0, 300));
        p.avoid_point((100, 100));
        let a = p.place((100, 100), "llama3_8b_25.11").unwrap();
        let b = p.place((102, 101), "llama3_8b_25.09").unwrap();
        assert_ne!(a, b, "a second label beside the same spot goes elsewhere");
        assert!(p.boxes.iter().all(|b| b.0 >= 0 && b.2 <= 400 && b.1 >= 0 && b.3 <= 300));
        // At the right edge the label goes to the left of its point.
        let (dx, _) = p.place((395, 200), "edge").unwrap();
        assert!(dx < 0);
        // Crowded out: every side taken.
        let mut q = LabelPlacer::new((0, 400), (0, 300));
        q.boxes.push((0, 0, 400, 300));
        assert_eq!(q.place((200, 150), "x"), None);
    }

    #[test]
    fn speedup_axes_reach_a_labelled_power_below_the_slowest_point() {
        assert_eq!(speedup_axis_floor(1.0), 1.0);
        assert_eq!(speedup_axis_floor(0.605), 0.5);
        assert_eq!(speedup_axis_floor(0.3), 0.25);
        assert_eq!(speedup_axis_floor(0.98), 0.98, "just under 1: the label 1 is close enough");
    }

    #[test]
    fn log_axes_label_powers_and_switch_to_decades_for_wide_ranges() {
        let gpus = LogAxis::new(2.0, 1.0, 1024.0);
        assert_eq!(gpus.label(0.0), "1");
        assert_eq!(gpus.label(10.0), "1024");
        assert_eq!(gpus.label(3.5), "", "long axes label only powers");
        assert_eq!(gpus.label_count(), 12);
        let short = LogAxis::new(2.0, 0.9, 1.3);
        assert_eq!(short.label(-1.0), "0.5");
        assert_eq!(short.label(0.5), "1.41", "short axes label fractions too");
        let one_gpu = LogAxis { powers_only: true, ..LogAxis::new(2.0, 1.0, 1.0) };
        assert_eq!((one_gpu.label(0.0), one_gpu.label(0.2)), ("1".to_string(), String::new()));
        let wide = LogAxis::fitting(50.0, 2e6);
        assert_eq!(wide.base, 10.0);
        assert_eq!(wide.label(2.0), "100");
        assert_eq!(wide.label(5.0), "100k");
        assert_eq!(wide.label(6.0), "1M");
        assert_eq!(wide.label(-2.0), "0.01");
        assert_eq!(LogAxis::fitting(1.0, 64.0).base, 2.0);
    }
}
