//! The report's plots: grouped bars and line panels, drawn by plotters into SVG text. No font
//! is loaded (plotters estimates text widths; the browser lays the text out), so the plots
//! build without system fonts and the same figures always give the same file.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;

/// Width and height of every plot, in pixels.
const SIZE: (u32, u32) = (760, 420);

/// Series colours in order: the first series of a bar chart is the floor (grey), the
/// operator's figures follow, so every plot reads the same way.
const COLOURS: [RGBColor; 4] = [
    RGBColor(150, 150, 150),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
];

/// One bar per category; `None` leaves a gap where a figure was not measured.
pub(super) struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// A bar chart with one group of bars per category, one bar per series.
pub(super) struct Bars {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
}

/// One panel of a line plot: `points` (x, y) joined in order.
pub(super) struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub points: Vec<(f64, f64)>,
}

/// Faint grid lines between two labelled ones: enough to read a value, few enough to keep
/// the files small.
const LIGHT_LINES: usize = 1;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// SVG text of what `draw` draws on a white canvas.
fn svg(draw: impl FnOnce(&Area) -> anyhow::Result<()>) -> anyhow::Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
    }
    Ok(text)
}

/// Top of a y axis starting at 0 for `values`, with room above the tallest for the legend.
fn y_top(values: impl Iterator<Item = f64>) -> f64 {
    let tallest = values.fold(0.0, f64::max);
    if tallest > 0.0 { tallest * 1.3 } else { 1.0 }
}

/// Label of x: the category whose group is centred on it, none between groups.
fn category_at(categories: &[String], x: f64) -> String {
    let nearest = x.round();
    if (x - nearest).abs() > 1e-6 || nearest < 0.0 {
        return String::new();
    }
    categories
        .get(nearest as usize)
        .cloned()
        .unwrap_or_default()
}

/// x axis of a grouped bar chart: group i is centred on x = i, ticks only at the centres
/// (a numeric axis would put its ticks at round numbers between the groups).
struct GroupAxis(usize);

impl Ranged for GroupAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = (value + 0.5) / self.0.max(1) as f64;
        limit.0 + (f64::from(limit.1 - limit.0) * share).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.max_num_points() == 0 {
            return Vec::new();
        }
        (0..self.0).map(|i| i as f64).collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

/// Grouped bar chart: category i's group is centred on x = i and 0.8 wide.
pub(super) fn grouped_bars(bars: &Bars) -> anyhow::Result<String> {
    svg(|root| {
        let groups = bars.categories.len();
        let top = y_top(
            bars.series
                .iter()
                .flat_map(|s| s.values.iter().flatten().copied()),
        );
        let mut chart = ChartBuilder::on(root)
            .caption(&bars.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(GroupAxis(groups), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .max_light_lines(LIGHT_LINES)
            .x_label_formatter(&|x| category_at(&bars.categories, *x))
            .y_desc(&bars.y_label)
            .draw()?;
        let width = 0.8 / bars.series.len().max(1) as f64;
        for (index, series) in bars.series.iter().enumerate() {
            let colour = COLOURS[index % COLOURS.len()];
            let left = -0.4 + index as f64 * width;
            let rectangles = series
                .values
                .iter()
                .enumerate()
                .filter_map(|(group, value)| {
                    let x = group as f64 + left;
                    value.map(|v| Rectangle::new([(x, 0.0), (x + width, v)], colour.filled()))
                });
            chart
                .draw_series(rectangles)?
                .label(&series.name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}

/// Line plots side by side under one title, each with its own axes (two quantities of
/// different units against the same x).
pub(super) fn line_panels(title: &str, panels: &[Panel]) -> anyhow::Result<String> {
    svg(|root| {
        let body = root.titled(title, ("sans-serif", 20))?;
        for (index, (area, panel)) in body
            .split_evenly((1, panels.len()))
            .iter()
            .zip(panels)
            .enumerate()
        {
            let colour = COLOURS[(index + 1) % COLOURS.len()];
            let x_top = panel
                .points
                .iter()
                .map(|p| p.0)
                .fold(0.0, f64::max)
                .max(1.0)
                * 1.05;
            let y_top = y_top(panel.points.iter().map(|p| p.1));
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.title, ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(56)
                .build_cartesian_2d(0.0..x_top, 0.0..y_top)?;
            chart
                .configure_mesh()
                .max_light_lines(LIGHT_LINES)
                .x_labels(5)
                .x_label_formatter(&|x| format!("{x:.0}"))
                .x_desc(&panel.x_label)
                .y_desc(&panel.y_label)
                .draw()?;
            chart.draw_series(LineSeries::new(
                panel.points.iter().copied(),
                colour.stroke_width(2),
            ))?;
            chart.draw_series(
                panel
                    .points
                    .iter()
                    .map(|&p| Circle::new(p, 4, colour.filled())),
            )?;
        }
        Ok(())
    })
}
