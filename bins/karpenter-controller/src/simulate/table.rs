//! The human-readable rendering of a [`Report`]: a few aligned tables and a summary line.

use std::fmt::Write;

use super::pods::compact;
use super::report::Report;

/// Pod groups shown per row before `+N more pods`.
const MAX_GROUPS: usize = 4;

/// Renders the report as text (ends with a newline).
///
/// Long because it writes the text report section by section in reading order; each section is a few lines of
/// formatting.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let inputs = report.inputs.join(", ");
    if report.bundled_example {
        let _ = writeln!(
            out,
            "Input: {inputs} (the bundled example; pass manifest files or directories to simulate your own)"
        );
    } else {
        let _ = writeln!(out, "Input: {inputs}");
    }
    let source = super::catalogue::describe_source(&report.catalogue.source);
    let _ = writeln!(
        out,
        "Instance types: {} from {source}; provider labels: {}",
        report.catalogue.instance_types, report.provider
    );
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }

    let s = &report.summary;
    out.push('\n');
    if report.new_nodes.is_empty() {
        out.push_str("New nodes: none\n");
    } else {
        let _ = writeln!(out, "New nodes: {} (${}/h)", report.new_nodes.len(), price(s.new_nodes_price_per_hour));
        let rows = report
            .new_nodes
            .iter()
            .map(|n| {
                vec![
                    n.name.clone(),
                    n.node_pool.clone(),
                    text(&n.instance_type),
                    text(&n.zone),
                    text(&n.capacity_type),
                    n.price.map(|p| marked(p, n.price_estimated)).unwrap_or_else(|| "-".to_owned()),
                    n.instance_type_options.to_string(),
                    compact(&n.pod_groups, MAX_GROUPS),
                ]
            })
            .collect();
        out.push_str(&table(&["NODE", "NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY", "$/H", "TYPES", "PODS"], rows));
        for n in report.new_nodes.iter().filter(|n| !n.requested_dra_drivers.is_empty()) {
            let _ = writeln!(out, "{} waits for DRA drivers: {}", n.name, n.requested_dra_drivers.join(", "));
        }
    }

    out.push('\n');
    if report.existing_nodes.is_empty() {
        out.push_str("Existing nodes: none\n");
    } else {
        let unpriced = if s.existing_nodes_unpriced > 0 {
            format!(", {} with unknown price", s.existing_nodes_unpriced)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "Existing nodes: {} (${}/h{unpriced})",
            report.existing_nodes.len(),
            price(s.existing_nodes_price_per_hour)
        );
        let rows = report
            .existing_nodes
            .iter()
            .map(|n| {
                let name = if n.in_flight { format!("{} (in flight)", n.name) } else { n.name.clone() };
                vec![
                    name,
                    text(&n.node_pool),
                    text(&n.instance_type),
                    text(&n.zone),
                    text(&n.capacity_type),
                    n.price.map(|p| marked(p, n.price_estimated)).unwrap_or_else(|| "unknown".to_owned()),
                    n.bound_pods.to_string(),
                    n.details.consolidatable_cell(),
                    compact(&n.pod_groups, MAX_GROUPS),
                ]
            })
            .collect();
        out.push_str(&table(
            &["NODE", "NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY", "$/H", "BOUND", "CONSOLIDATABLE", "NEW PODS"],
            rows,
        ));
        for n in report.existing_nodes.iter().filter(|n| n.price_unknown.is_some()) {
            let _ = writeln!(out, "  {}: price unknown: {}", n.name, text(&n.price_unknown));
        }
        for n in &report.existing_nodes {
            if let Some(line) = n.details.line() {
                let _ = writeln!(out, "  {}: {line}", n.name);
            }
        }
    }

    out.push('\n');
    if report.unschedulable.is_empty() {
        out.push_str("Unschedulable pods: none\n");
    } else {
        let _ = writeln!(out, "Unschedulable pods: {}", s.unschedulable_pods);
        let rows =
            report.unschedulable.iter().map(|u| vec![compact(&u.pod_groups, MAX_GROUPS), u.reason.clone()]).collect();
        out.push_str(&table(&["PODS", "REASON"], rows));
    }

    out.push('\n');
    if s.timed_out {
        out.push_str("The scheduler's deadline fired: the rest of the pods were not tried.\n");
    }
    let _ = writeln!(
        out,
        "Summary: {} pending {}: {} on {} new {}, {} on existing nodes, {} unschedulable.\n\
         Cost: new nodes ${}/h, existing nodes ${}/h.",
        s.pending_pods,
        plural(s.pending_pods, "pod", "pods"),
        s.pods_on_new_nodes,
        s.new_nodes,
        plural(s.new_nodes, "node", "nodes"),
        s.pods_on_existing_nodes,
        s.unschedulable_pods,
        price(s.new_nodes_price_per_hour),
        price(s.existing_nodes_price_per_hour),
    );
    if s.buffer_pods > 0 {
        let _ = writeln!(
            out,
            "Of the pending pods, {} are CapacityBuffer virtual pods (room kept for pods that do not exist yet).",
            s.buffer_pods
        );
    }
    out
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

pub(super) fn price(p: f64) -> String {
    format!("{p:.4}")
}

/// A price, followed by ` (estimated)` when it is an estimate.
pub(super) fn marked(p: f64, estimated: bool) -> String {
    if estimated { format!("{} (estimated)", price(p)) } else { price(p) }
}

fn text(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".to_owned())
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub(super) fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_and_leaves_the_last_unpadded() {
        let t = table(&["A", "LONG HEADER", "Z"], vec![vec!["wide cell".into(), "x".into(), "last".into()]]);
        assert_eq!(t, "A          LONG HEADER  Z\nwide cell  x            last\n");
    }

    #[test]
    fn prices_have_four_decimals() {
        assert_eq!(price(0.3), "0.3000");
        assert_eq!(price(12.34567), "12.3457");
    }
}
