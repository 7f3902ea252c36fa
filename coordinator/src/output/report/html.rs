//! The report as one HTML page: inline CSS, inline SVG charts, no script and no reference
//! to anything outside the file. Under each chart, its data table holds the plotted values
//! at full precision (what a test, or a reader copying numbers, reads).

use super::chart::Chart;
use super::{Report, Section, Table};
use std::fmt::Write;

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1280px;\
color:#222;padding:0 16px}h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:2em}\
table{border-collapse:collapse;margin:10px 0;font-size:.85em}th,td{border:1px solid #ddd;padding:3px 8px;\
text-align:left;vertical-align:top}th{background:#f4f4f4}caption{text-align:left;font-weight:600;padding:4px 0}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:8px 20px}\
figure{margin:10px 0}figure svg{width:100%;height:auto}figcaption{display:none}details{font-size:.85em}.note{color:#555}\
nav a{margin-right:12px}";

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn table(o: &mut String, t: &Table, class: &str) {
    let _ = write!(o, "<table class=\"{class}\"><caption>{}</caption><thead><tr>", escape(&t.caption));
    for h in &t.head {
        let _ = write!(o, "<th>{}</th>", escape(h));
    }
    o.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        o.push_str("<tr>");
        for c in r {
            let _ = write!(o, "<td>{}</td>", escape(c));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>");
}

/// A chart's plotted values, one row per point and per mark.
fn data_table(c: &Chart) -> Table {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let mut rows: Vec<Vec<String>> = c
        .series
        .iter()
        .flat_map(|s| {
            s.points.iter().map(|p| {
                vec![
                    s.name.clone(),
                    p.x.to_string(),
                    p.y.to_string(),
                    opt(p.range.map(|r| r.0)),
                    opt(p.range.map(|r| r.1)),
                    p.label.clone().unwrap_or_default(),
                ]
            })
        })
        .collect();
    rows.extend(c.marks.iter().map(|m| {
        let series = c.series.get(m.series).map_or(String::new(), |s| s.name.clone());
        vec![format!("mark: {series}"), m.x.to_string(), String::new(), String::new(), String::new(), m.label.clone()]
    }));
    let head = ["series", &c.x_label, &c.y_label, "CI low", "CI high", "label"];
    Table { caption: format!("data: {}", c.title), head: head.iter().map(|h| h.to_string()).collect(), rows }
}

/// Inline SVG needs no namespace declaration in HTML; dropping it keeps the page free of
/// any URL that is not the user's own.
fn inline(svg: &str) -> &str {
    svg.trim_start_matches(|c: char| c != '<')
}

fn section(o: &mut String, s: &Section, svgs: &mut impl Iterator<Item = String>) {
    let _ = write!(o, "<section id=\"{}\"><h2>{}</h2>", escape(&s.id), escape(&s.title));
    for n in &s.notes {
        let _ = write!(o, "<p class=\"note\">{}</p>", escape(n));
    }
    for t in &s.tables {
        table(o, t, "values");
    }
    o.push_str("<div class=\"charts\">");
    for c in &s.charts {
        let svg = svgs.next().unwrap_or_default().replace(" xmlns=\"http://www.w3.org/2000/svg\"", "");
        let _ = write!(
            o,
            "<figure class=\"chart\" id=\"chart-{id}\" data-chart=\"{id}\">{svg}<figcaption>{title}</figcaption><details><summary>Data</summary>",
            id = escape(&c.id),
            svg = inline(&svg),
            title = escape(&c.title)
        );
        table(o, &data_table(c), "data");
        o.push_str("</details></figure>");
    }
    o.push_str("</div></section>");
}

/// The page; `svgs` are the charts drawn, in the order of the sections' charts.
pub fn page(r: &Report, svgs: Vec<String>) -> String {
    let mut o = String::with_capacity(64 * 1024 + svgs.iter().map(String::len).sum::<usize>());
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1><p class=\"note\">surge {v}; inputs: {i}</p><nav>",
        t = escape(&r.title),
        v = env!("CARGO_PKG_VERSION"),
        i = escape(&r.inputs.join(", "))
    );
    for s in &r.sections {
        let _ = write!(o, "<a href=\"#{}\">{}</a>", escape(&s.id), escape(&s.title));
    }
    o.push_str("</nav>");
    let mut svgs = svgs.into_iter();
    for s in &r.sections {
        section(&mut o, s, &mut svgs);
    }
    o.push_str("</body></html>\n");
    o
}
