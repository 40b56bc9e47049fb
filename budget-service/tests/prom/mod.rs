//! A strict parser of the OpenMetrics text `/metrics` serves, for the
//! tests: every family has TYPE and a non-empty HELP before its samples,
//! every sample belongs to a declared family (with the suffixes its type
//! allows), label values are well quoted, values are numbers, `# EOF` ends
//! the text. Any deviation panics with the offending line.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default, Clone)]
pub struct Family {
    pub kind: String,
    pub help: String,
    pub unit: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub family: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
    pub samples: Vec<Sample>,
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_sum", "_count", "_created"],
        "gauge" | "unknown" => &[""],
        "info" => &["_info"],
        "stateset" => &[""],
        other => panic!("unexpected metric type {other}"),
    }
}

fn parse_labels(s: &str, line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest
            .find("=\"")
            .unwrap_or_else(|| panic!("bad labels: {line}"));
        let key = &rest[..eq];
        assert!(valid_name(key), "bad label name `{key}`: {line}");
        let mut val = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break eq + 2 + i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => val.push(c),
                    _ => panic!("bad escape: {line}"),
                },
                Some((_, c)) => val.push(c),
                None => panic!("unterminated label value: {line}"),
            }
        };
        assert!(
            out.insert(key.to_string(), val).is_none(),
            "duplicate label {key}: {line}"
        );
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else {
            assert!(rest.is_empty(), "bad labels: {line}");
        }
    }
    out
}

/// Parses the text, panicking on any deviation.
pub fn parse(text: &str) -> Exposition {
    let mut e = Exposition::default();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "must end with # EOF");
    let mut current: Option<String> = None;
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name, arg) = (
                parts.next().unwrap(),
                parts.next().unwrap_or_else(|| panic!("bad line: {line}")),
                parts.next().unwrap_or(""),
            );
            assert!(valid_name(name), "bad metric name: {line}");
            let f = e.families.entry(name.to_string()).or_default();
            match what {
                "HELP" => {
                    assert!(f.help.is_empty(), "two HELP lines: {line}");
                    assert!(!arg.trim().is_empty(), "empty HELP: {line}");
                    f.help = arg.to_string();
                }
                "TYPE" => {
                    assert!(f.kind.is_empty(), "two TYPE lines: {line}");
                    suffixes(arg);
                    f.kind = arg.to_string();
                }
                "UNIT" => {
                    assert!(
                        name.ends_with(&format!("_{arg}")),
                        "unit not in name: {line}"
                    );
                    f.unit = Some(arg.to_string());
                }
                _ => panic!("unknown comment line: {line}"),
            }
            current = Some(name.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "bad comment: {line}");
        let (head, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, l)) => (
                n,
                parse_labels(
                    l.strip_suffix('}')
                        .unwrap_or_else(|| panic!("bad labels: {line}")),
                    line,
                ),
            ),
            None => (head, BTreeMap::new()),
        };
        assert!(valid_name(name), "bad sample name: {line}");
        let fam = current
            .clone()
            .unwrap_or_else(|| panic!("sample before any family: {line}"));
        let f = &e.families[&fam];
        assert!(
            !f.kind.is_empty() && !f.help.is_empty(),
            "family {fam} lacks TYPE or HELP before {line}"
        );
        let suffix = name
            .strip_prefix(fam.as_str())
            .unwrap_or_else(|| panic!("sample {name} outside its family {fam}"));
        assert!(
            suffixes(&f.kind).contains(&suffix),
            "sample {name} not allowed in {} {fam}",
            f.kind
        );
        e.samples.push(Sample {
            name: name.to_string(),
            family: fam,
            labels,
            value,
        });
    }
    for (name, f) in &e.families {
        assert!(
            !f.kind.is_empty() && !f.help.is_empty(),
            "family {name} lacks TYPE or HELP"
        );
    }
    e
}

impl Exposition {
    /// The value of the one sample `name` whose labels include `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let hits: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert!(
            hits.len() <= 1,
            "{name} {labels:?} matches {} samples",
            hits.len()
        );
        hits.first().map(|s| s.value)
    }

    /// Every sample name (with its suffixes: `_total`, `_bucket`, ...).
    pub fn sample_names(&self) -> BTreeSet<String> {
        self.samples.iter().map(|s| s.name.clone()).collect()
    }

    /// Every name a query may use: sample names and, for families with
    /// samples, the family name with each suffix of its type.
    pub fn queryable_names(&self) -> BTreeSet<String> {
        let mut out = self.sample_names();
        for (name, f) in &self.families {
            for s in suffixes(&f.kind).iter().filter(|s| **s != "_created") {
                out.insert(format!("{name}{s}"));
            }
        }
        out
    }
}
