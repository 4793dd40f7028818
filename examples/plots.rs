//! Draws the benchmark's figures as SVG, for docs/benchmarks.md:
//!
//! - `contention-wait.svg`: the distribution (CDF) of the wait for the lock
//!   across processes, quorlock beside rslock, from `examples/contention.rs
//!   --data` files;
//! - `contention-share.svg`: each client's share of the acquisitions, from
//!   the same files (a fair lock gives every client the same share);
//! - `throughput-ratios.svg`: quorlock's throughput against the round-trip
//!   floor and against rslock, and fenced against unfenced, per layout and
//!   N, from `bench --summarize` JSON lines.
//!
//! ```text
//! plots OUT_DIR [--bench BENCH.jsonl] [--contention QUORLOCK_DATA RSLOCK_DATA] [--title TEXT]
//! ```
//!
//! `scripts/bench.sh` runs it after its runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

type AnyError = Box<dyn std::error::Error>;

const QUORLOCK: RGBColor = RGBColor(31, 119, 180);
const RSLOCK: RGBColor = RGBColor(214, 39, 40);
const FENCED: RGBColor = RGBColor(44, 160, 44);

/// One client library's contention runs: each client's acquisitions (per
/// run), and every acquisition's wait in ms.
#[derive(Default)]
struct Contention {
    setup: String,
    shares: Vec<Vec<u64>>,
    /// `lock` calls that gave up, over all runs: their waits are not in `waits_ms`.
    failed: u64,
    waits_ms: Vec<f64>,
}

/// Reads a `contention --data` file.
fn read_contention(path: &Path) -> Result<Contention, AnyError> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    let mut data = Contention::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let numbers = |words: std::str::SplitWhitespace<'_>| -> Vec<u64> {
            words.filter_map(|word| word.parse().ok()).collect()
        };
        match words.next() {
            Some("run") => {
                // KIND PROCESSES TASKS SECONDS
                if let [_, processes, tasks, seconds] = words.collect::<Vec<_>>()[..] {
                    data.setup = format!("{processes} processes x {tasks} tasks, {seconds} s");
                }
            }
            Some("shares") => data.shares.push(numbers(words)),
            Some("failed") => data.failed += numbers(words).iter().sum::<u64>(),
            Some("waits") => {
                data.waits_ms
                    .extend(numbers(words).into_iter().map(|us| us as f64 / 1000.0));
            }
            _ => {}
        }
    }
    if data.shares.is_empty() || data.waits_ms.is_empty() {
        return Err(format!("{}: no runs in it", path.display()).into());
    }
    data.waits_ms.sort_by(f64::total_cmp);
    Ok(data)
}

/// The wait CDF of each library's acquisitions, on a log scale of ms (calls
/// that gave up have no wait to show; the legend counts them).
fn draw_waits(
    out: &Path,
    runs: &[(&str, RGBColor, &Contention)],
    title: &str,
) -> Result<(), AnyError> {
    let root = canvas(out)?;
    let highest = (runs.iter())
        .filter_map(|(_, _, data)| data.waits_ms.last().copied())
        .fold(1.0_f64, f64::max);
    let lowest = (runs.iter())
        .filter_map(|(_, _, data)| data.waits_ms.first().copied())
        .fold(highest, f64::min)
        .max(0.01);
    let mut chart = titled(&root, format!("Wait for the lock across processes {title}"))
        .build_cartesian_2d((lowest..highest * 1.2).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("wait, ms (log scale)")
        .y_desc("share of acquisitions")
        .draw()?;
    for (name, color, data) in runs {
        let n = data.waits_ms.len() as f64;
        let points = (data.waits_ms.iter().enumerate())
            .map(|(i, wait)| (wait.max(lowest), (i + 1) as f64 / n));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(format!(
                "{name} ({}): {} acquisitions; {} calls gave up, not shown",
                data.setup,
                data.waits_ms.len(),
                data.failed
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Each client's share of its run's acquisitions, in %, clients sorted from
/// the most to the fewest, the median over runs; a fair lock is a flat line.
fn shares(data: &Contention) -> Vec<f64> {
    let clients = data.shares.iter().map(Vec::len).max().unwrap_or(0);
    let per_run: Vec<Vec<f64>> = (data.shares.iter())
        .map(|run| {
            let total = run.iter().sum::<u64>().max(1) as f64;
            let mut share: Vec<f64> = run.iter().map(|n| *n as f64 * 100.0 / total).collect();
            share.sort_by(|a, b| b.total_cmp(a));
            share
        })
        .collect();
    (0..clients)
        .map(|rank| {
            let mut at: Vec<f64> = per_run
                .iter()
                .filter_map(|run| run.get(rank).copied())
                .collect();
            at.sort_by(f64::total_cmp);
            at.get(at.len() / 2).copied().unwrap_or(0.0)
        })
        .collect()
}

fn draw_shares(
    out: &Path,
    runs: &[(&str, RGBColor, &Contention)],
    title: &str,
) -> Result<(), AnyError> {
    let root = canvas(out)?;
    let all: Vec<(&str, RGBColor, Vec<f64>)> = runs
        .iter()
        .map(|(name, color, data)| (*name, *color, shares(data)))
        .collect();
    let clients = all.iter().map(|(_, _, s)| s.len()).max().unwrap_or(1);
    let top = all
        .iter()
        .flat_map(|(_, _, s)| s.iter().copied())
        .fold(1.0, f64::max);
    let mut chart = titled(
        &root,
        format!("Each client's share of the acquisitions {title}"),
    )
    .build_cartesian_2d(0.0..clients as f64, 0.0..top * 1.4)?;
    chart
        .configure_mesh()
        .x_labels(clients * 2 + 1)
        .x_label_formatter(&|x| {
            let centred = (x - x.floor() - 0.5).abs() < 0.26;
            if centred {
                format!("{}", x.floor() as usize + 1)
            } else {
                String::new()
            }
        })
        .x_desc("processes' clients, from the most acquisitions to the fewest (median of runs)")
        .y_desc("% of the run's acquisitions")
        .disable_x_mesh()
        .draw()?;
    let width = 0.8 / all.len().max(1) as f64;
    for (offset, (name, color, share)) in all.iter().enumerate() {
        let color = *color;
        let bars = share.iter().enumerate().map(|(rank, value)| {
            let x = rank as f64 + 0.1 + offset as f64 * width;
            Rectangle::new([(x, 0.0), (x + width, *value)], color.filled())
        });
        chart
            .draw_series(bars)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    let fair = 100.0 / clients as f64;
    let label = format!("an equal share ({fair:.1} %)");
    level_and_legend(&mut chart, clients as f64, fair, label)?;
    root.present()?;
    Ok(())
}

/// A white 720 × 420 SVG canvas at `out`.
fn canvas(out: &Path) -> Result<DrawingArea<SVGBackend<'_>, Shift>, AnyError> {
    let root = SVGBackend::new(out, (720, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    Ok(root)
}

/// A chart on `root` with `caption` and the figures' margins.
fn titled<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: String,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50);
    builder
}

/// The bar charts' chart.
type Bars<'a> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A level line at `y` across `0..x_end`, labelled, and the legend.
fn level_and_legend(
    chart: &mut Bars<'_>,
    x_end: f64,
    y: f64,
    label: String,
) -> Result<(), AnyError> {
    chart
        .draw_series(LineSeries::new(
            [(0.0, y), (x_end, y)],
            BLACK.stroke_width(1),
        ))?
        .label(label)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// `(layout, N) → (q/floor, q/rslock, fenced/unfenced)` from the
/// throughput rows of `bench --summarize` JSON lines.
fn read_ratios(path: &Path) -> Result<BTreeMap<(String, u64), [f64; 3]>, AnyError> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    let mut plain = BTreeMap::new();
    let mut fenced = BTreeMap::new();
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let (Some(layout), Some(nodes), Some(workload)) = (
            row["layout"].as_str(),
            row["nodes"].as_u64(),
            row["workload"].as_str(),
        ) else {
            continue;
        };
        let at = (layout.to_owned(), nodes);
        match workload {
            "throughput" => {
                let of = |name: &str| row[name].as_f64().unwrap_or(f64::NAN);
                plain.insert(at, (of("quorlock"), of("floor"), of("rslock")));
            }
            "throughput, fenced" => {
                fenced.insert(at, row["quorlock"].as_f64().unwrap_or(f64::NAN));
            }
            _ => {}
        }
    }
    if plain.is_empty() {
        return Err(format!("{}: no throughput rows", path.display()).into());
    }
    Ok(plain
        .into_iter()
        .map(|(at, (quorlock, floor, rslock))| {
            let fenced = fenced.get(&at).copied().unwrap_or(f64::NAN);
            (at, [quorlock / floor, quorlock / rslock, fenced / quorlock])
        })
        .collect())
}

fn draw_ratios(
    out: &Path,
    ratios: &BTreeMap<(String, u64), [f64; 3]>,
    title: &str,
) -> Result<(), AnyError> {
    let root = canvas(out)?;
    let groups: Vec<(&(String, u64), &[f64; 3])> = ratios.iter().collect();
    let top = (groups.iter())
        .flat_map(|(_, values)| values.iter().copied())
        .filter(|value| value.is_finite())
        .fold(1.2, f64::max);
    let mut chart = titled(&root, format!("Throughput ratios {title}"))
        .build_cartesian_2d(0.0..groups.len() as f64, 0.0..top * 1.35)?;
    let names: Vec<String> = groups
        .iter()
        .map(|((layout, nodes), _)| format!("{layout}, N = {nodes}"))
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let index = x.floor() as usize;
            let centred = (x - x.floor() - 0.5).abs() < 0.26;
            if centred {
                names.get(index).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("ratio (medians of the runs)")
        .draw()?;
    let series = [
        ("quorlock / floor", QUORLOCK),
        ("quorlock / rslock", RSLOCK),
        ("fenced / unfenced", FENCED),
    ];
    for (which, (name, color)) in series.into_iter().enumerate() {
        let bars = groups
            .iter()
            .enumerate()
            .filter_map(move |(index, (_, values))| {
                let value = values[which];
                let x = index as f64 + 0.1 + which as f64 * 0.27;
                value
                    .is_finite()
                    .then(|| Rectangle::new([(x, 0.0), (x + 0.25, value)], color.filled()))
            });
        chart
            .draw_series(bars)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    level_and_legend(&mut chart, groups.len() as f64, 1.0, "1.0".into())?;
    root.present()?;
    Ok(())
}

/// The command line: the output directory and the inputs.
struct Inputs {
    out: PathBuf,
    bench: Option<PathBuf>,
    contention: Option<(PathBuf, PathBuf)>,
    title: String,
}

fn parse(args: &[String]) -> Option<Inputs> {
    let (out, mut rest) = args.split_first()?;
    let mut inputs = Inputs {
        out: PathBuf::from(out),
        bench: None,
        contention: None,
        title: String::new(),
    };
    while let Some((flag, tail)) = rest.split_first() {
        rest = match (flag.as_str(), tail) {
            ("--bench", [path, tail @ ..]) => {
                inputs.bench = Some(PathBuf::from(path));
                tail
            }
            ("--contention", [quorlock, rslock, tail @ ..]) => {
                inputs.contention = Some((PathBuf::from(quorlock), PathBuf::from(rslock)));
                tail
            }
            ("--title", [title, tail @ ..]) => {
                inputs.title = format!("({title})");
                tail
            }
            _ => return None,
        };
    }
    Some(inputs)
}

fn draw(inputs: &Inputs) -> Result<(), AnyError> {
    std::fs::create_dir_all(&inputs.out)?;
    if let Some((quorlock, rslock)) = &inputs.contention {
        let (quorlock, rslock) = (read_contention(quorlock)?, read_contention(rslock)?);
        let runs = [
            ("quorlock", QUORLOCK, &quorlock),
            ("rslock", RSLOCK, &rslock),
        ];
        for (file, draw) in [
            (
                "contention-wait.svg",
                draw_waits
                    as fn(&Path, &[(&str, RGBColor, &Contention)], &str) -> Result<(), AnyError>,
            ),
            ("contention-share.svg", draw_shares),
        ] {
            let path = inputs.out.join(file);
            draw(&path, &runs, &inputs.title)?;
            println!("wrote {}", path.display());
        }
    }
    if let Some(bench) = &inputs.bench {
        let path = inputs.out.join("throughput-ratios.svg");
        draw_ratios(&path, &read_ratios(bench)?, &inputs.title)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(inputs) = parse(&args) else {
        eprintln!(
            "usage: plots OUT_DIR [--bench BENCH.jsonl] [--contention QUORLOCK_DATA RSLOCK_DATA] [--title TEXT]"
        );
        return ExitCode::from(2);
    };
    match draw(&inputs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("plots: {err}");
            ExitCode::FAILURE
        }
    }
}
