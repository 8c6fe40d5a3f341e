//! Pictures of a run, as SVG by plotters: accuracy per round, bytes per round at
//! every measured level, TPFL's cluster sizes, each kept FCM as a heat map, and a grid's
//! summary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use flint_common::model::kept::{KeptModel, ModelFile};
use flint_common::strategy::tpfl::TpflRound;
use flint_server::results::RunResults;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const SIZE: (u32, u32) = (900, 520);
const FONT: &str = "sans-serif";

/// Writes the run's pictures into `dir/plots/` and returns their paths.
pub fn run_plots(dir: &Path, r: &RunResults) -> anyhow::Result<Vec<PathBuf>> {
    run_plots_with(dir, r, None)
}

/// [`run_plots`], the accuracy with a baseline run's mean beside it (`flint grid`: the `local`
/// run of the same data, split and seed).
pub fn run_plots_with(
    dir: &Path,
    r: &RunResults,
    baseline: Option<&RunResults>,
) -> anyhow::Result<Vec<PathBuf>> {
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots)
        .with_context(|| format!("cannot create {}", plots.display()))?;
    let mut written = Vec::new();
    let mut keep = |name: &str, draw: &dyn Fn(&Path) -> anyhow::Result<bool>| {
        let path = plots.join(name);
        if draw(&path).with_context(|| format!("cannot draw {}", path.display()))? {
            written.push(path);
        }
        anyhow::Ok(())
    };
    keep("accuracy.svg", &|p| accuracy(p, r, baseline))?;
    keep("bytes.svg", &|p| bytes(p, r))?;
    keep("clusters.svg", &|p| clusters(p, r))?;
    for m in kept_maps(dir)? {
        keep(&format!("fcm-{}.svg", m.client), &|p| heat_map(p, &m))?;
    }
    Ok(written)
}

fn caption(r: &RunResults, what: &str) -> String {
    format!("{} ({}, seed {}): {what}", r.name, r.strategy, r.seed)
}

/// A colour per client, spread around the hue circle.
fn hue(i: usize, n: usize) -> RGBColor {
    let (r, g, b) = HSLColor(i as f64 / n.max(1) as f64, 0.6, 0.45)
        .to_backend_color()
        .rgb;
    RGBColor(r, g, b)
}

/// Each client's accuracy (thin) and the mean (thick) after every round; with a shared test
/// set, the model's accuracy on it too.
fn accuracy(path: &Path, r: &RunResults, baseline: Option<&RunResults>) -> anyhow::Result<bool> {
    let rounds: Vec<_> = r.rounds.iter().filter(|rr| rr.mean.is_some()).collect();
    if rounds.is_empty() {
        return Ok(false);
    }
    let last = rounds.last().map_or(1, |rr| rr.round);
    // From a tenth below the lowest accuracy shown, so that differences are visible.
    let lowest = rounds
        .iter()
        .flat_map(|rr| {
            rr.metrics
                .values()
                .map(|m| m.accuracy)
                .chain(rr.global_test.map(|m| m.accuracy))
        })
        .fold(1.0, f64::min);
    let lowest = baseline
        .into_iter()
        .flat_map(|b| b.rounds.iter().filter_map(|rr| rr.mean.map(|m| m.accuracy)))
        .fold(lowest, f64::min);
    let floor = ((lowest - 0.05) * 10.0).floor().max(0.0) / 10.0;
    // Headroom above 1 for the legend, which then covers no client's line.
    let top = 1.0 + (1.0 - floor) * LEGEND_HEADROOM;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption(r, "accuracy per round"), (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.5f64..last as f64 + 0.5, floor..top)?;
    chart
        .configure_mesh()
        .x_desc("round")
        .y_desc("accuracy")
        .x_labels(last.min(20) as usize)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| match *y <= 1.0 + 1e-9 {
            true => format!("{y:.2}"),
            false => String::new(),
        })
        .draw()?;
    client_lines(&mut chart, r, &rounds)?;
    let mean: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|rr| rr.mean.map(|m| (rr.round as f64, m.accuracy)))
        .collect();
    chart
        .draw_series(LineSeries::new(mean.clone(), BLACK.stroke_width(3)))?
        .label("mean over the clients' test splits")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(3)));
    chart.draw_series(mean.iter().map(|&p| Circle::new(p, 4, BLACK.filled())))?;
    if let Some(b) = baseline {
        let local: Vec<(f64, f64)> = b
            .rounds
            .iter()
            .filter(|rr| rr.round <= last)
            .filter_map(|rr| rr.mean.map(|m| (rr.round as f64, m.accuracy)))
            .collect();
        let grey = RGBColor(110, 110, 110);
        chart
            .draw_series(DashedLineSeries::new(local, 8, 5, grey.stroke_width(2)))?
            .label(format!("{} (local baseline), mean", b.name))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2))
            });
    }
    let global: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|rr| rr.global_test.map(|m| (rr.round as f64, m.accuracy)))
        .collect();
    if !global.is_empty() {
        chart
            .draw_series(LineSeries::new(global.clone(), RED.stroke_width(3)))?
            .label("on the shared test set")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(3)));
        chart.draw_series(global.iter().map(|&p| Circle::new(p, 4, RED.filled())))?;
    }
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("each client")
        .legend(|(x, y)| {
            PathElement::new(
                vec![(x, y), (x + 20, y)],
                hue(0, 1).mix(0.5).stroke_width(1),
            )
        });
    legend(&mut chart, SeriesLabelPosition::UpperRight, 14)?;
    root.present()?;
    Ok(true)
}

/// Each client's accuracy per round, a thin line in its own hue.
fn client_lines<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b, plotters::coord::types::RangedCoordf64>,
    r: &RunResults,
    rounds: &[&flint_server::results::RoundResult],
) -> anyhow::Result<()> {
    let clients: Vec<u32> = r.clients.iter().map(|c| c.id).collect();
    for (i, id) in clients.iter().enumerate() {
        let points: Vec<(f64, f64)> = rounds
            .iter()
            .filter_map(|rr| rr.metrics.get(id).map(|m| (rr.round as f64, m.accuracy)))
            .collect();
        let colour = hue(i, clients.len()).mix(0.5);
        chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(1)))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 2, colour.filled())))?;
    }
    Ok(())
}

/// The accuracy axis runs this share of its span past 1: room for a legend of four lines.
const LEGEND_HEADROOM: f64 = 0.3;

/// Bytes per round summed over the clients, up and down, at each level measured (log scale).
fn bytes(path: &Path, r: &RunResults) -> anyhow::Result<bool> {
    type Pick = fn(&flint_common::wire::ledger::Traffic) -> u64;
    let levels: [(&str, Pick); 4] = [
        ("payload", |t| t.payload),
        ("message", |t| t.message),
        ("socket", |t| t.socket),
        ("link", |t| t.link),
    ];
    let mut series = Vec::new();
    for (way, up) in [("up", true), ("down", false)] {
        for (shade, (level, pick)) in levels.into_iter().enumerate() {
            let points: Vec<(f64, f64)> = r
                .rounds
                .iter()
                .map(|rr| {
                    let t = if up {
                        &rr.bytes_total.up
                    } else {
                        &rr.bytes_total.down
                    };
                    (rr.round as f64, pick(t) as f64)
                })
                .filter(|(_, b)| *b > 0.0)
                .collect();
            if !points.is_empty() {
                series.push((format!("{way}, {level}"), up, shade, points));
            }
        }
    }
    if series.is_empty() {
        return Ok(false);
    }
    let all = || {
        series
            .iter()
            .flat_map(|(_, _, _, p)| p.iter().map(|(_, b)| *b))
    };
    let (min, max) = (
        all().fold(f64::INFINITY, f64::min),
        all().fold(1.0, f64::max),
    );
    let last = r.rounds.last().map_or(0, |rr| rr.round);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption(r, "bytes per round, all clients"), (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        // Headroom above for the legend.
        .build_cartesian_2d(
            -0.5f64..last as f64 + 0.5,
            ((min / 2.0).max(1.0)..max * 20.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("round (0: join and first download)")
        .y_desc("bytes")
        .x_labels((last as usize + 1).min(20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| human(*y))
        .draw()?;
    let shades = [1.0, 0.7, 0.45, 0.25];
    for (label, up, shade, points) in series {
        let base = if up { BLUE } else { RED };
        let style = base.mix(shades[shade]).stroke_width(2);
        line_with_points(&mut chart, points, style, 3, label)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight, 13)?;
    root.present()?;
    Ok(true)
}

type Chart<'a, 'b, Y> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

/// One labelled series: a line through its points, each point marked.
fn line_with_points<Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, '_, Y>,
    points: Vec<(f64, f64)>,
    style: ShapeStyle,
    radius: i32,
    label: impl Into<String>,
) -> anyhow::Result<()> {
    chart
        .draw_series(LineSeries::new(points.clone(), style))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    chart.draw_series(
        points
            .iter()
            .map(|&p| Circle::new(p, radius, style.filled())),
    )?;
    Ok(())
}

/// The series' legend, boxed, at `position`.
fn legend<'a, 'b: 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'a, 'b, Y>,
    position: SeriesLabelPosition,
    size: u32,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, size))
        .draw()?;
    Ok(())
}

fn human(b: f64) -> String {
    match b {
        b if b >= 1e9 => format!("{:.0} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.0} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

/// TPFL: how many clients won each class, round by round.
fn clusters(path: &Path, r: &RunResults) -> anyhow::Result<bool> {
    let mut by_class: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    let mut last = 0;
    for rr in &r.rounds {
        let Some(t) = rr
            .report
            .as_ref()
            .and_then(|rep| rep.details::<TpflRound>())
        else {
            continue;
        };
        last = rr.round;
        for (class, members) in &t.clusters {
            by_class
                .entry(*class)
                .or_default()
                .push((rr.round as f64, members.len() as f64));
        }
    }
    if by_class.is_empty() {
        return Ok(false);
    }
    let most = by_class
        .values()
        .flat_map(|p| p.iter().map(|(_, n)| *n))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            caption(r, "clients per cluster (the class they won)"),
            (FONT, 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.5f64..last as f64 + 0.5, 0f64..most + 1.0)?;
    chart
        .configure_mesh()
        .x_desc("round")
        .y_desc("clients")
        .y_labels(most as usize + 2)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_labels((last as usize).min(20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    let classes = by_class.len();
    for (i, (class, points)) in by_class.into_iter().enumerate() {
        let style = hue(i, classes).stroke_width(2);
        line_with_points(&mut chart, points, style, 3, r.class_name(class))?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight, 13)?;
    root.present()?;
    Ok(true)
}

/// The run's kept FCMs, one per distinct map (every client of a federation holds the same
/// one after the last download).
fn kept_maps(dir: &Path) -> anyhow::Result<Vec<ModelFile>> {
    let Ok(entries) = std::fs::read_dir(dir.join("models")) else {
        return Ok(Vec::new());
    };
    let mut maps: Vec<ModelFile> = Vec::new();
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let m = match ModelFile::parse(&std::fs::read(&p)?) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("flint: no heat map of {}: {e}", p.display());
                continue;
            }
        };
        if matches!(m.model, KeptModel::Fcm { .. }) && !maps.iter().any(|k| k.model == m.model) {
            maps.push(m);
        }
    }
    Ok(maps)
}

/// An FCM's links: a row per source concept, a column per target concept (only the concepts
/// that have links: the paper's maps learn links into the classes); blue −1, white 0, red +1.
fn heat_map(path: &Path, m: &ModelFile) -> anyhow::Result<bool> {
    let KeptModel::Fcm { matrix } = &m.model else {
        return Ok(false);
    };
    let names: Vec<String> = m
        .features
        .iter()
        .cloned()
        .chain(m.classes.iter().map(|c| format!("class {c}")))
        .collect();
    let n = names.len();
    let sources: Vec<usize> = (0..n)
        .filter(|&s| matrix[s].iter().any(|w| *w != 0.0))
        .collect();
    let targets: Vec<usize> = (0..n)
        .filter(|&t| matrix.iter().any(|row| row[t] != 0.0))
        .collect();
    if sources.is_empty() {
        return Ok(false);
    }
    let (rows, columns) = (sources.len(), targets.len());
    let size = (
        260 + 90 * columns as u32 + COLOUR_BAR,
        (300 + 20 * rows as u32).max(410),
    );
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let (map, bar) = root.split_horizontally(size.0 - COLOUR_BAR);
    colour_bar(&bar)?;
    let mut chart = ChartBuilder::on(&map)
        .caption(
            format!(
                "{}: FCM links, source → target (blue −1, white 0, red +1)",
                m.client
            ),
            (FONT, 16),
        )
        .margin(12)
        // Column names run upwards, whole up to 28 characters, as the rows'.
        .x_label_area_size(180)
        .y_label_area_size(190)
        .build_cartesian_2d(0f64..columns as f64, 0f64..rows as f64)?;
    // A label sits in the middle of its cell; rows run from the top.
    let middle = |v: f64, count: usize| {
        let i = v.floor() as usize;
        ((v - i as f64 - 0.5).abs() < 1e-9 && i < count).then_some(i)
    };
    let row_name = |v: &f64| {
        middle(rows as f64 - *v, rows).map_or_else(String::new, |i| short(&names[sources[i]], 28))
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(2 * rows + 1)
        .y_label_formatter(&row_name)
        .label_style((FONT, 12))
        .draw()?;
    // Column names run downwards from under their column, whole up to 28 characters (as the
    // rows'), so that neighbours never overprint.
    let upright = TextStyle::from((FONT, 12))
        .transform(FontTransform::Rotate90)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (j, &t) in targets.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(j as f64 + 0.5, 0.0));
        let name = short(&names[t], 28);
        map.draw(&Text::new(name, (x, y + 6), upright.clone()))?;
    }
    let cells = sources.iter().enumerate().flat_map(|(i, &s)| {
        let top = (rows - i) as f64;
        targets.iter().enumerate().map(move |(j, &t)| {
            Rectangle::new(
                [(j as f64, top), (j as f64 + 1.0, top - 1.0)],
                link_colour(matrix[s][t]).filled(),
            )
        })
    });
    chart.draw_series(cells)?;
    root.present()?;
    Ok(true)
}

/// Width of the heat map's colour bar, with its scale.
const COLOUR_BAR: u32 = 90;

/// A link's weight as a colour: blue −1, white 0, red +1.
fn link_colour(w: f64) -> RGBColor {
    let w = w.clamp(-1.0, 1.0);
    let fade = |c: u8| (255.0 - (255.0 - f64::from(c)) * w.abs()) as u8;
    let (r, g, b) = if w < 0.0 {
        (33, 102, 172)
    } else {
        (178, 24, 43)
    };
    RGBColor(fade(r), fade(g), fade(b))
}

/// The scale of [`link_colour`], −1 at the bottom to +1 at the top.
fn colour_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .margin_top(50)
        .margin_bottom(40)
        .margin_right(10)
        .y_label_area_size(40)
        .build_cartesian_2d(0f64..1f64, -1f64..1f64)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(5)
        .y_label_formatter(&|v| format!("{v:+.1}"))
        .label_style((FONT, 12))
        .draw()?;
    const STEPS: usize = 40;
    let step = 2.0 / STEPS as f64;
    chart.draw_series((0..STEPS).map(|k| {
        let low = -1.0 + k as f64 * step;
        Rectangle::new(
            [(0.0, low), (1.0, low + step)],
            link_colour(low + step / 2.0).filled(),
        )
    }))?;
    Ok(())
}

/// `name` cut to `max` characters, the cut marked.
fn short(name: &str, max: usize) -> String {
    match name.chars().count() > max {
        true => name.chars().take(max - 1).chain(['…']).collect(),
        false => name.to_string(),
    }
}

/// A grid's summary: each experiment's mean accuracy after its last round (a bar), with the
/// range over its seeds (a line).
pub fn grid_chart(path: &Path, rows: &[(String, Vec<f64>)]) -> anyhow::Result<bool> {
    let rows: Vec<&(String, Vec<f64>)> = rows.iter().filter(|(_, v)| !v.is_empty()).collect();
    if rows.is_empty() {
        return Ok(false);
    }
    let n = rows.len();
    let root = SVGBackend::new(path, (900, 110 + 34 * n as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "accuracy after the last round: mean (bar), min–max over seeds (line)",
            (FONT, 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(280)
        .build_cartesian_2d(0f64..1f64, 0f64..n as f64)?;
    let names: Vec<String> = rows.iter().map(|(name, _)| name.clone()).collect();
    // Experiments run from the top, a label in the middle of its band.
    let label = |v: &f64| {
        let from_top = n as f64 - v;
        let i = from_top.floor() as usize;
        if (from_top - i as f64 - 0.5).abs() < 1e-9 && i < n {
            names[i].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(2 * n + 1)
        .y_label_formatter(&label)
        .x_desc("accuracy")
        .label_style((FONT, 12))
        .draw()?;
    for (i, (_, values)) in rows.iter().enumerate() {
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let (low, high) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                (l.min(v), h.max(v))
            });
        let y = (n - 1 - i) as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y + 0.2), (mean, y + 0.8)],
            hue(i, n).mix(0.75).filled(),
        )))?;
        if values.len() > 1 {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(low, y + 0.5), (high, y + 0.5)],
                BLACK.stroke_width(2),
            )))?;
        }
    }
    root.present()?;
    Ok(true)
}

/// One strategy's point of an accuracy-versus-bytes figure.
pub struct Tradeoff {
    pub name: String,
    /// Bytes per client per round, up and down, at message level.
    pub bytes: f64,
    /// Mean accuracy after the last round.
    pub accuracy: f64,
}

/// The points no other point beats: none has at most their bytes and at least their accuracy,
/// better in one. In order of bytes.
pub fn pareto_front(points: &[Tradeoff]) -> Vec<usize> {
    let beats = |a: &Tradeoff, b: &Tradeoff| {
        a.bytes <= b.bytes
            && a.accuracy >= b.accuracy
            && (a.bytes < b.bytes || a.accuracy > b.accuracy)
    };
    let mut front: Vec<usize> = (0..points.len())
        .filter(|&i| !points.iter().any(|p| beats(p, &points[i])))
        .collect();
    front.sort_by(|&a, &b| points[a].bytes.total_cmp(&points[b].bytes));
    front
}

/// A dataset's strategies as points of accuracy against bytes (log scale), the Pareto front
/// drawn through the points it holds.
pub fn pareto_chart(path: &Path, data: &str, points: &[Tradeoff]) -> anyhow::Result<bool> {
    if points.len() < 2 {
        return Ok(false);
    }
    let (min, max) = points.iter().fold((f64::INFINITY, 1.0f64), |(l, h), p| {
        (l.min(p.bytes), h.max(p.bytes))
    });
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{data}: accuracy against bytes per client per round"),
            (FONT, 18),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(((min / 3.0).max(1.0)..max * 8.0).log_scale(), 0f64..1.05)?;
    chart
        .configure_mesh()
        .x_desc("bytes per client per round, up + down, message level")
        .y_desc("accuracy after the last round")
        .x_label_formatter(&|x| human(*x))
        .draw()?;
    let front: Vec<(f64, f64)> = pareto_front(points)
        .into_iter()
        .map(|i| (points[i].bytes, points[i].accuracy))
        .collect();
    chart
        .draw_series(std::iter::once(PathElement::new(
            front.clone(),
            RED.mix(0.6).stroke_width(2),
        )))?
        .label("Pareto front")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    for (i, p) in points.iter().enumerate() {
        let on = front.contains(&(p.bytes, p.accuracy));
        let colour = if on { RED } else { hue(i, points.len()) };
        chart.draw_series(std::iter::once(Circle::new(
            (p.bytes, p.accuracy),
            5,
            colour.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            short(&p.name, 28),
            (p.bytes, p.accuracy),
            (FONT, 12).into_font().color(&BLACK),
        )))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()?;
    root.present()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heat map has a colour bar, and long names are cut, not overprinted.
    #[test]
    fn a_heat_map_has_its_scale_and_cuts_long_names() {
        let long = "a class name far too long for one cell of the map".to_string();
        let matrix = vec![
            vec![0.0, 0.0, 0.8, -0.5],
            vec![0.0, 0.0, -0.3, 0.9],
            vec![0.0, 0.0, 0.0, 0.0],
            vec![0.0, 0.0, 0.0, 0.0],
        ];
        let m = ModelFile::new(
            "p1",
            vec![long.clone(), "short".into()],
            vec!["x".into(), "y".into()],
            "none".into(),
            KeptModel::Fcm { matrix },
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fcm.svg");
        assert!(heat_map(&path, &m).unwrap());
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("+1.0") && svg.contains("+0.0") && svg.contains("-1.0"));
        assert!(!svg.contains(&long), "the long name is cut");
        assert!(
            svg.contains("class a class name far too …"),
            "cut at 28 characters, marked: {svg}"
        );
        assert!(svg.contains("rotate(90"), "column names run upwards");
        assert_eq!(short("short", 12), "short");
    }

    fn point(name: &str, bytes: f64, accuracy: f64) -> Tradeoff {
        Tradeoff {
            name: name.into(),
            bytes,
            accuracy,
        }
    }

    /// A point is on the front when nothing is both cheaper (or as cheap) and more accurate
    /// (or as accurate); ties in both stay on it.
    #[test]
    fn the_pareto_front_holds_the_points_nothing_beats() {
        let points = [
            point("tpfl", 400.0, 0.96),
            point("fedavg", 1.7e6, 0.53),
            point("ifca", 8.6e6, 0.77),
            point("fedtm", 4.0e4, 0.96),
            point("cheap", 100.0, 0.20),
            point("twin", 400.0, 0.96),
        ];
        assert_eq!(pareto_front(&points), vec![4, 0, 5]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pareto.svg");
        assert!(pareto_chart(&path, "mnist", &points).unwrap());
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("Pareto front") && svg.contains("ifca"));
        assert!(
            !pareto_chart(&path, "mnist", &points[..1]).unwrap(),
            "one point is no figure"
        );
    }
}
