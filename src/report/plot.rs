//! Plots with plotters, as PNG or SVG (chosen by the file extension): speedup versus GPU count with
//! the ideal line, stacked time-breakdown bars, a Gantt chart of one iteration, and
//! predicted-versus-measured scatter. Text is drawn with the DejaVu Sans font compiled into the
//! binary (assets/), so no system fonts are needed. Takes plain data (and, for the Gantt chart, a
//! finished run); never simulates. Files are written atomically.

use super::critical::critical_path;
use crate::dag::{Dag, Phase, Work};
use crate::error::{Error, Result};
use crate::sim::Run;
use crate::units::Nanos;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
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

/// One point of a predicted-versus-measured scatter.
#[derive(Debug, Clone, PartialEq)]
pub struct ScatterPoint {
    pub predicted: f64,
    pub measured: f64,
    pub label: String,
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
        Phase::PipelineTransfer => RGBColor(196, 156, 148),
        Phase::ParamGather => RGBColor(247, 182, 210),
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
    labels: &[&str],
    x_max: f64,
    x_desc: &str,
) -> std::result::Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let n = labels.len();
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(4) as u32 * 8 + 20;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 24))
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
        .x_desc(x_desc)
        .label_style((FONT, 13))
        .draw()?;
    Ok(chart)
}

/// The series legend in the upper left corner of an x-y chart.
fn legend_box<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
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

/// Speedup versus GPU count, one line per series, with the ideal (linear) speedup dashed.
pub fn speedup_chart(path: &Path, title: &str, series: &[Series]) -> Result<()> {
    render_with!(path, (900, 600), |root| draw_speedup(root, title, series))
}

fn draw_speedup<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, series: &[Series]) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let max_x = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0, f64::max);
    let max_y = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(max_x, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(15)
        .margin_right(45)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_x * 1.05, 0.0..max_y * 1.05)?;
    chart
        .configure_mesh()
        .x_desc("GPUs")
        .y_desc("speedup")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style((FONT, 15))
        .draw()?;
    chart
        .draw_series(DashedLineSeries::new([(1.0, 1.0), (max_x, max_x)], 8, 6, BLACK.stroke_width(1)))?
        .label("ideal")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    for (i, s) in series.iter().enumerate() {
        let color = series_color(i);
        // Earlier lines are wider, so a line hidden under an identical later one still shows.
        let width = 2 + 2 * (series.len() - 1 - i).min(3) as u32;
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(width)))?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    legend_box(&mut chart)?;
    root.present()?;
    Ok(())
}

/// Horizontal stacked bars of where an iteration's time goes (ScaleDNN Fig. 3 style).
pub fn breakdown_chart(path: &Path, title: &str, bars: &[Bar]) -> Result<()> {
    let height = 180 + 28 * bars.len().max(1) as u32;
    render_with!(path, (1000, height), |root| draw_breakdown(root, title, bars))
}

fn draw_breakdown<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, bars: &[Bar]) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let height = root.dim_in_pixel().1 as i32;
    let (root, legend) = root.split_vertically(height - 40);
    let max_x = bars.iter().map(|b| b.seconds.iter().sum::<f64>()).fold(0.0, f64::max).max(1e-9) * 1000.0;
    let n = bars.len();
    let labels: Vec<&str> = bars.iter().map(|b| b.label.as_str()).collect();
    let mut chart = row_chart(&root, title, &labels, max_x * 1.05, "time per iteration (ms)")?;
    for (c, &color) in CATEGORY_COLORS.iter().enumerate() {
        chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
            let y = (n - 1 - i) as f64;
            let x0: f64 = b.seconds[..c].iter().sum::<f64>() * 1000.0;
            let x1 = x0 + b.seconds[c] * 1000.0;
            Rectangle::new([(x0, y - 0.35), (x1, y + 0.35)], color.filled())
        }))?;
    }
    let entries: Vec<(String, ShapeStyle)> =
        CATEGORY_NAMES.iter().zip(&CATEGORY_COLORS).map(|(n, c)| (n.to_string(), c.filled())).collect();
    legend_strip(&legend, &entries)?;
    root.present()?;
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
    let mut chart = row_chart(&root, title, &labels, ms(t1), "time since the iteration started (ms)")?;
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

/// Predicted versus measured values (e.g. iteration times or speedups), with the y = x line and
/// each point labelled. For `validate`.
pub fn scatter_chart(path: &Path, title: &str, axis_unit: &str, points: &[ScatterPoint]) -> Result<()> {
    render_with!(path, (800, 800), |root| draw_scatter(root, title, axis_unit, points))
}

fn draw_scatter<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    unit: &str,
    points: &[ScatterPoint],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let max =
        points.iter().flat_map(|p| [p.predicted, p.measured]).filter(|v| v.is_finite()).fold(1e-12, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(15)
        .margin_right(45)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max, 0.0..max)?;
    chart
        .configure_mesh()
        .x_desc(format!("predicted ({unit})"))
        .y_desc(format!("measured ({unit})"))
        .label_style((FONT, 15))
        .draw()?;
    chart
        .draw_series(DashedLineSeries::new([(0.0, 0.0), (max, max)], 8, 6, BLACK.stroke_width(1)))?
        .label("predicted = measured")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    let color = series_color(0);
    chart.draw_series(points.iter().map(|p| Circle::new((p.predicted, p.measured), 5, color.filled())))?;
    chart.draw_series(
        points
            .iter()
            .map(|p| Text::new(p.label.clone(), (p.predicted, p.measured), (FONT, 12).into_font().color(&BLACK))),
    )?;
    legend_box(&mut chart)?;
    root.present()?;
    Ok(())
}
