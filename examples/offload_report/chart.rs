//! The report's pictures and data: SVG line charts against write size (plotters),
//! one CSV of every cell, and an index page listing the charts.

use plotters::prelude::*;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Line colours, in series order: distinct on white (the matplotlib "tab" set).
const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(127, 127, 127),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

/// One line of a chart: a stack's figure at each write size.
pub struct Series {
    /// The legend.
    pub name: String,
    /// (write size in bytes, value).
    pub points: Vec<(usize, f64)>,
}

/// One cell of the report, for the CSV.
pub struct Row {
    /// The experiment (`tcp_bulk`, `tunnel_vxlan`, ...).
    pub experiment: String,
    /// `uni` or `bi`.
    pub direction: &'static str,
    /// The stack or offload mode.
    pub stack: String,
    /// Bytes per write.
    pub write: usize,
    /// Goodput.
    pub gbit_per_s: f64,
    /// CPU seconds per 10^9 bytes.
    pub cpu_s_per_gb: f64,
}

/// Where the report writes, and what it has written.
pub struct Out {
    dir: PathBuf,
    title: &'static str,
    rows: Vec<Row>,
    charts: Vec<(String, String)>,
}

pub fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1024 && b % 1024 == 0 => format!("{} KiB", b / 1024),
        b => format!("{b} B"),
    }
}

impl Out {
    /// Writes into `dir` (created); `title` heads the index page.
    pub fn new(dir: &Path, title: &'static str) -> Result<Out, Box<dyn Error>> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the output directory {}: {e}", dir.display()))?;
        Ok(Out {
            dir: dir.to_path_buf(),
            title,
            rows: Vec::new(),
            charts: Vec::new(),
        })
    }

    /// Keeps a cell for the CSV.
    pub fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Draws `series` into `<name>.svg`: `title`, the y axis `y_label`.
    pub fn chart(
        &mut self,
        name: &str,
        title: &str,
        y_label: &str,
        series: &[Series],
    ) -> Result<(), Box<dyn Error>> {
        let file = format!("{name}.svg");
        let path = self.dir.join(&file);
        let ymax = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.15;
        let root = SVGBackend::new(&path, (860, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(5.7f64..18.3f64, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_labels(13)
            .x_label_formatter(&|x| {
                let r = x.round();
                if (x - r).abs() < 0.05 && (6.0..=18.0).contains(&r) {
                    human(1usize << (r as u32))
                } else {
                    String::new()
                }
            })
            .light_line_style(RGBColor(238, 238, 238))
            .x_desc("bytes per write (log scale)")
            .y_desc(y_label)
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()].to_rgba();
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|(w, v)| ((*w as f64).log2(), *v))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .draw()?;
        root.present()?;
        self.charts.push((file, title.to_string()));
        Ok(())
    }

    /// Writes `report.csv` and `index.html`; returns the directory.
    pub fn finish(self) -> Result<PathBuf, Box<dyn Error>> {
        let mut csv =
            String::from("experiment,direction,stack,write_bytes,gbit_per_s,cpu_s_per_gb\n");
        for r in &self.rows {
            let _ = writeln!(
                csv,
                "{},{},{},{},{:.3},{:.4}",
                r.experiment, r.direction, r.stack, r.write, r.gbit_per_s, r.cpu_s_per_gb
            );
        }
        std::fs::write(self.dir.join("report.csv"), csv)?;
        let title = self.title;
        let mut html = format!(
            "<!doctype html><meta charset=utf-8><title>{title}</title>\
             <h1>{title}</h1><p>Figures: <a href=report.csv>report.csv</a></p>\n",
        );
        for (file, title) in &self.charts {
            let _ = writeln!(html, "<h2>{title}</h2><img src=\"{file}\" alt=\"{title}\">");
        }
        std::fs::write(self.dir.join("index.html"), html)?;
        Ok(self.dir)
    }
}
