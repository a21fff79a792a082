//! docs/benchmarks.md's text: intro, runs, goals, then a section per benchmark.

use std::fmt::Write as _;

use super::{FIGURES_JSON, Metadata, Report, Section};

/// Where the page's links point from, relative to the repository root.
const PAGE_DIR: &str = "docs/";

pub(super) const NOT_MEASURED: &str = "not measured";

pub(super) fn seconds(value: f64) -> String {
    format!("{value:.2}")
}

pub(super) fn ratio(value: Option<f64>) -> String {
    value.map_or_else(|| NOT_MEASURED.to_string(), |v| format!("{v:.2}×"))
}

pub(super) fn optional_seconds(value: Option<f64>) -> String {
    value.map_or_else(|| NOT_MEASURED.to_string(), seconds)
}

/// A Markdown table; the array lengths keep every row as wide as the header.
pub(super) fn table<const N: usize>(
    headers: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let line = |cells: &[&str]| format!("| {} |\n", cells.join(" | "));
    let mut text = line(&headers);
    text += &line(&["---"; N]);
    for row in rows {
        text += &line(&row.each_ref().map(String::as_str));
    }
    text
}

impl Report {
    /// The whole page.
    pub fn markdown(&self) -> String {
        let json = FIGURES_JSON.strip_prefix(PAGE_DIR).unwrap_or(FIGURES_JSON);
        let mut page = format!(
            "# Benchmarks\n\n\
             Written by vk-bench (e2e/src/bin/vk-bench.rs) from figures measured on the local \
             cluster; do not edit it by hand. To measure everything again: `make up`, then \
             `make bench`. `cargo run -p valkey-e2e --bin vk-bench -- --only <section>` measures \
             one section again and keeps the other sections' figures from \
             [{json}]({json}); each section says which run measured it.\n\n"
        );
        page += &self.runs_markdown();
        page += &self.goals_markdown();
        for section in Section::ALL {
            page += &self.section_markdown(section);
        }
        page
    }

    /// One row per distinct run, with the sections it measured.
    fn runs_markdown(&self) -> String {
        let mut runs: Vec<(&Metadata, Vec<&str>)> = Vec::new();
        for (section, run) in &self.measured_in {
            match runs.iter_mut().find(|(known, _)| *known == run) {
                Some((_, sections)) => sections.push(section.title()),
                None => runs.push((run, vec![section.title()])),
            }
        }
        if runs.is_empty() {
            return "## Runs\n\nNo run has measured anything yet.\n\n".to_string();
        }
        let rows = runs.into_iter().map(|(run, sections)| {
            [
                run.date_utc.clone(),
                format!("`{}`", run.commit),
                run.machine(),
                run.operator_build.clone(),
                run.valkey_versions.join(", "),
                format!("`{}`", run.command),
                sections.join(", "),
            ]
        });
        let headers = [
            "Date",
            "Commit",
            "Machine",
            "Operator build",
            "Valkey",
            "Command",
            "Measured",
        ];
        format!("## Runs\n\n{}\n", table(headers, rows))
    }

    fn goals_markdown(&self) -> String {
        let rows = self.goals().into_iter().map(|g| {
            let verdict = match &g.note {
                Some(note) => format!("{} ({note})", g.verdict.label()),
                None => g.verdict.label().to_string(),
            };
            [
                g.what,
                g.figure.unwrap_or_else(|| NOT_MEASURED.to_string()),
                g.limit,
                verdict,
            ]
        });
        let parallelism = self.fleet.as_ref().map_or_else(
            || "vk-bench sets it".to_string(),
            |f| format!("{} in the fleet run", f.parallelism),
        );
        format!(
            "## Goals\n\n{}\n\
             Parallelism is how many clusters the operator is expected to bring up at once \
             ({parallelism}): the step that reaches 200 clusters should settle in one cluster's \
             time-to-Active × the clusters it added ÷ parallelism, and the goal allows twice \
             that. Figures are compared with their limits as shown.\n\n",
            table(["Goal", "Figure", "Limit", "Verdict"], rows)
        )
    }

    fn section_markdown(&self, section: Section) -> String {
        let mut text = format!("## {}\n\n{}\n\n", section.title(), section.about());
        let Some(figures) = self.benchmark(section).map(|b| b.figures()) else {
            let _ = writeln!(
                text,
                "Not measured in this run: `vk-bench --only {}` measures it.\n",
                section.only_flag()
            );
            return text;
        };
        if let Some(run) = self.measured_in.get(&section) {
            let _ = writeln!(text, "Measured {} at `{}`.\n", run.date_utc, run.commit);
        }
        let _ = writeln!(
            text,
            "![{}](benchmarks/{}.svg)\n\n{figures}",
            section.title(),
            section.stem()
        );
        text
    }
}
