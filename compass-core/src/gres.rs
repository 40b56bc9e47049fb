//! The one GRES/TRES parser of compass (issue 12): every string in which
//! Slurm names GPUs, read the same way by the budget service, the plugin and
//! the replay.
//!
//! Two families of strings, both lists of entries separated by `,` (or `;`)
//! outside parentheses:
//! - **GRES lists**, as slurmctld reports a node (`node_info_t.gres`,
//!   `gres_used`, a job's `gres_detail_str`) or a request
//!   (`tres_per_job/node/task/socket`): `name[:type][:count][(...)]`, with an
//!   optional `gres:` or `gres/` prefix: `gpu:8`, `gpu:a100:8(S:0-1)`,
//!   `gpu:a100:4(S:0),gpu:h100:4(S:1),shard:8`, `gres:gpu:a100:4`,
//!   `gres:gpu` (count 1). A missing count is 1; `gpu:a100` is a type, not a
//!   count. The parenthesised part (sockets `S:0-1`, indices `IDX:0-3`) is
//!   kept as text.
//! - **TRES strings** (`tres_req_str`, `tres_alloc_str`, `--tres-per-*` in
//!   the `=` form): `key[/name[:type]]=count`: `cpu=2,mem=4G,gres/gpu=4`,
//!   `gres/gpu:a100=4`. Slurm lists a typed GPU entry next to the untyped
//!   total (`gres/gpu=8,gres/gpu:a100=8`); [`GpuCounts::total`] counts it once.
//!
//! Counts accept Slurm's `K`/`M`/`G`/`T` suffixes (powers of 1024, as
//! `mem=4G` or `mps:1K`). Anything else is a [`CoreError::Gres`] naming the
//! input and what is wrong; the parser never panics (property-tested).

use std::collections::BTreeMap;

use crate::error::{CoreError, Result};

/// One entry of a GRES list or a TRES string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A generic resource: `gpu:a100:4(S:0)`, `gres/gpu:a100=4`, `shard:8`.
    Gres {
        /// `gpu`, `shard`, `mps`, ...
        name: String,
        /// `a100`; `None` when untyped.
        gres_type: Option<String>,
        count: u64,
        /// The text in parentheses (`S:0-1`, `IDX:0,2`), if any.
        detail: Option<String>,
    },
    /// Any other TRES: `cpu=2`, `mem=4096` (megabytes), `node=1`,
    /// `billing=4`, `license/x=1`. `mem` is converted to megabytes.
    Tres { key: String, count: u64 },
}

/// GPUs by type: what a node has, a job asks for or holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuCounts {
    /// Untyped GPUs (`gpu:8`, `gres/gpu=8`).
    pub untyped: u64,
    /// Typed GPUs, type -> count (`gpu:a100:4` -> `a100`: 4).
    pub by_type: BTreeMap<String, u64>,
}

impl GpuCounts {
    /// All GPUs. An untyped count next to typed ones is Slurm's total of
    /// them (TRES strings list `gres/gpu=8,gres/gpu:a100=8`), so the larger
    /// of the untyped count and the typed sum.
    pub fn total(&self) -> u64 {
        let typed: u64 = self.by_type.values().fold(0, |a, b| a.saturating_add(*b));
        self.untyped.max(typed)
    }

    /// [`GpuCounts::total`] as a `u32` (saturating).
    pub fn total_u32(&self) -> u32 {
        u32::try_from(self.total()).unwrap_or(u32::MAX)
    }

    /// GPUs of type `t` (0 when the node or job names no such type).
    pub fn of_type(&self, t: &str) -> u64 {
        self.by_type.get(t).copied().unwrap_or(0)
    }

    /// The only type named, if exactly one is (`gpu:a100:4` -> `a100`).
    pub fn single_type(&self) -> Option<&str> {
        match self.by_type.len() {
            1 => self.by_type.keys().next().map(String::as_str),
            _ => None,
        }
    }

    /// No GPU at all.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }
}

/// A parsed GRES list or TRES string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gres {
    pub entries: Vec<Entry>,
}

impl Gres {
    /// Parses a GRES list or a TRES string (see the module docs). Empty,
    /// `(null)` and `N/A` are an empty list.
    pub fn parse(input: &str) -> Result<Gres> {
        let s = input.trim();
        if s.is_empty() || s == "(null)" || s == "N/A" {
            return Ok(Gres::default());
        }
        let mut entries = Vec::new();
        for raw in split_top(input)? {
            let e = raw.trim();
            if e.is_empty() {
                continue;
            }
            entries.push(parse_entry(input, e)?);
        }
        Ok(Gres { entries })
    }

    /// GPUs of the list (entries named `gpu`).
    pub fn gpus(&self) -> GpuCounts {
        let mut c = GpuCounts::default();
        for e in &self.entries {
            if let Entry::Gres {
                name,
                gres_type,
                count,
                ..
            } = e
            {
                if name != "gpu" {
                    continue;
                }
                match gres_type {
                    None => c.untyped = c.untyped.saturating_add(*count),
                    Some(t) => {
                        let v = c.by_type.entry(t.clone()).or_insert(0);
                        *v = v.saturating_add(*count);
                    }
                }
            }
        }
        c
    }

    /// Whether any entry names GPUs (even `gpu:0`).
    pub fn names_gpus(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e, Entry::Gres { name, .. } if name == "gpu"))
    }

    /// The count of a plain TRES key (`cpu`, `mem` in MB, `node`).
    pub fn tres(&self, key: &str) -> Option<u64> {
        self.entries.iter().find_map(|e| match e {
            Entry::Tres { key: k, count } if k == key => Some(*count),
            _ => None,
        })
    }
}

/// GPUs of a GRES list or TRES string: `parse(s)?.gpus()`.
pub fn gpus(input: &str) -> Result<GpuCounts> {
    Ok(Gres::parse(input)?.gpus())
}

/// GPUs of a string when it names GPUs; `Ok(None)` when it names none
/// (`cpu=4,node=1`, `shard:8`, empty).
pub fn gpus_named(input: &str) -> Result<Option<GpuCounts>> {
    let g = Gres::parse(input)?;
    Ok(g.names_gpus().then(|| g.gpus()))
}

fn bad(input: &str, why: impl Into<String>) -> CoreError {
    CoreError::Gres {
        input: input.chars().take(200).collect(),
        why: why.into(),
    }
}

/// Splits at `,` and `;` outside parentheses; unbalanced parentheses are an
/// error.
fn split_top(input: &str) -> Result<Vec<&str>> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| bad(input, "`)` without `(`"))?
            }
            ',' | ';' if depth == 0 => {
                out.push(&input[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(bad(input, "`(` without `)`"));
    }
    out.push(&input[start..]);
    Ok(out)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn parse_entry(input: &str, e: &str) -> Result<Entry> {
    // Slurm prints the type of an untyped GRES as `(null)` in some strings
    // (`GresUsed=gpu:(null):0(IDX:N/A)`, a node's `gpu:(null):2`): no type
    // (issue #11: such an entry was an error, so no GPUs were read).
    let owned;
    let e = if e.contains(":(null)") {
        owned = e.replacen(":(null)", "", 1);
        owned.as_str()
    } else {
        e
    };
    // The parenthesised detail, only at the end.
    let (body, detail) = match e.find('(') {
        Some(i) => {
            if !e.ends_with(')') {
                return Err(bad(input, format!("`{e}`: text after `)`")));
            }
            let inner = &e[i + 1..e.len() - 1];
            if inner.contains('(') || inner.contains(')') {
                return Err(bad(input, format!("`{e}`: nested parentheses")));
            }
            (e[..i].trim(), Some(inner.to_string()))
        }
        None => (e, None),
    };
    let (is_gres, body) = if let Some(r) = body.strip_prefix("gres:") {
        (true, r)
    } else if let Some(r) = body.strip_prefix("gres/") {
        (true, r)
    } else {
        (false, body)
    };
    if let Some((key, value)) = body.split_once('=') {
        // TRES form: key=count or gres/name[:type]=count.
        let count = parse_count(input, value.trim(), key == "mem")?;
        let key = key.trim();
        if !is_gres {
            if key.is_empty()
                || !key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':'))
            {
                return Err(bad(input, format!("`{e}`: bad TRES name `{key}`")));
            }
            if detail.is_some() {
                return Err(bad(input, format!("`{e}`: parentheses in a TRES entry")));
            }
            return Ok(Entry::Tres {
                key: key.to_string(),
                count,
            });
        }
        let (name, gres_type) = match key.split_once(':') {
            Some((n, t)) => (n, Some(t)),
            None => (key, None),
        };
        if !valid_name(name) || gres_type.is_some_and(|t| !valid_name(t)) {
            return Err(bad(input, format!("`{e}`: bad GRES name `{key}`")));
        }
        return Ok(Entry::Gres {
            name: name.to_string(),
            gres_type: gres_type.map(str::to_string),
            count,
            detail,
        });
    }
    // GRES list form: name[:type][:count], `no_consume` ignored.
    let parts: Vec<&str> = body
        .split(':')
        .map(str::trim)
        .filter(|p| *p != "no_consume")
        .collect();
    let name = parts[0];
    if !valid_name(name) {
        return Err(bad(input, format!("`{e}`: bad GRES name `{name}`")));
    }
    let (gres_type, count) = match &parts[1..] {
        [] => (None, 1),
        [one] => {
            if one.starts_with(|c: char| c.is_ascii_digit()) {
                (None, parse_count(input, one, false)?)
            } else if valid_name(one) {
                (Some(*one), 1)
            } else {
                return Err(bad(input, format!("`{e}`: bad GRES type `{one}`")));
            }
        }
        [t, n] => {
            if !valid_name(t) {
                return Err(bad(input, format!("`{e}`: bad GRES type `{t}`")));
            }
            (Some(*t), parse_count(input, n, false)?)
        }
        _ => return Err(bad(input, format!("`{e}`: expected name[:type][:count]"))),
    };
    Ok(Entry::Gres {
        name: name.to_string(),
        gres_type: gres_type.map(str::to_string),
        count,
        detail,
    })
}

/// A count with an optional `K`/`M`/`G`/`T` suffix (x1024 each). For `mem`
/// the unit is megabytes: no suffix or `M` is MB, `K` rounds up, `G`/`T`
/// multiply.
fn parse_count(input: &str, s: &str, mem: bool) -> Result<u64> {
    let (digits, suffix) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    if digits.is_empty() {
        return Err(bad(input, format!("`{s}` is not a count")));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| bad(input, format!("count `{s}` is too large")))?;
    let shift: i32 = match (suffix, mem) {
        ("", _) => 0,
        ("K" | "k", false) => 10,
        ("M" | "m", false) => 20,
        ("G" | "g", false) => 30,
        ("T" | "t", false) => 40,
        ("K" | "k", true) => -10,
        ("M" | "m", true) => 0,
        ("G" | "g", true) => 10,
        ("T" | "t", true) => 20,
        _ => {
            return Err(bad(
                input,
                format!("count `{s}`: unknown suffix `{suffix}`"),
            ))
        }
    };
    if shift < 0 {
        return Ok(n.div_ceil(1024));
    }
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| bad(input, format!("count `{s}` is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn total(s: &str) -> u64 {
        gpus(s).unwrap().total()
    }

    #[test]
    fn node_gres_as_slurmctld_reports_it() {
        assert_eq!(total("gpu:8"), 8);
        assert_eq!(total("gpu:8(S:0-1)"), 8);
        let g = gpus("gpu:a100:8(S:0-1)").unwrap();
        assert_eq!((g.total(), g.of_type("a100"), g.untyped), (8, 8, 0));
        assert_eq!(g.single_type(), Some("a100"));
        let g = gpus("gpu:a100:4,gpu:h100:4").unwrap();
        assert_eq!((g.total(), g.of_type("a100"), g.of_type("h100")), (8, 4, 4));
        assert_eq!(g.single_type(), None);
        let g = gpus("gpu:a100:4(S:0),gpu:h100:4(S:1)").unwrap();
        assert_eq!((g.total(), g.of_type("h100")), (8, 4));
        // Other GRES beside: not GPUs.
        assert_eq!(total("gpu:a100:2(S:0-1),shard:8(S:0-1)"), 2);
        assert_eq!(total("mps:1K,gpu:l40s:4(S:0)"), 4);
        assert_eq!(total("shard:8"), 0);
        assert!(!Gres::parse("shard:8").unwrap().names_gpus());
        // Indices with commas inside parentheses (gres_used, gres_detail).
        assert_eq!(total("gpu:a100:3(IDX:0,2-3),mps:0(0/100)"), 3);
        assert_eq!(total("gpu:h100:0(IDX:N/A)"), 0);
        // An untyped GRES whose type Slurm prints as `(null)`.
        assert_eq!(total("gpu:(null):2"), 2);
        assert_eq!(total("gpu:(null):0(IDX:N/A)"), 0);
        let g = gpus("gpu:tesla:2(S:0),gpu:(null):2(S:1)").unwrap();
        assert_eq!((g.of_type("tesla"), g.untyped), (2, 2));
        for empty in ["", "(null)", "N/A", "  "] {
            assert_eq!(total(empty), 0, "{empty:?}");
        }
        let g = Gres::parse("gpu:a100:8(S:0-1)").unwrap();
        assert_eq!(
            g.entries[0],
            Entry::Gres {
                name: "gpu".into(),
                gres_type: Some("a100".into()),
                count: 8,
                detail: Some("S:0-1".into())
            }
        );
    }

    #[test]
    fn request_strings_in_every_form_slurm_stores() {
        assert_eq!(total("gres:gpu:4"), 4);
        assert_eq!(gpus("gres:gpu:a100:4").unwrap().of_type("a100"), 4);
        assert_eq!(total("gres/gpu=4"), 4);
        assert_eq!(gpus("gres/gpu:a100=4").unwrap().of_type("a100"), 4);
        let g = Gres::parse("cpu=2,gres/gpu:a100=2").unwrap();
        assert_eq!((g.gpus().total(), g.tres("cpu")), (2, Some(2)));
        assert_eq!(total("gres:gpu"), 1);
        assert_eq!(gpus("gres:gpu:a100").unwrap().of_type("a100"), 1);
        assert_eq!(total("gres/gpu:a100:2"), 2);
        assert_eq!(total("gres:mps:100,gres:gpu:3"), 3);
        // tres_req_str / tres_alloc_str: typed entry beside the total.
        let g = Gres::parse("cpu=4,mem=16G,node=1,billing=4,gres/gpu=8,gres/gpu:a100=8").unwrap();
        assert_eq!((g.gpus().total(), g.gpus().of_type("a100")), (8, 8));
        assert_eq!((g.tres("mem"), g.tres("node")), (Some(16384), Some(1)));
        assert_eq!(Gres::parse("mem=1000M").unwrap().tres("mem"), Some(1000));
        assert_eq!(Gres::parse("mem=1500K").unwrap().tres("mem"), Some(2));
        assert_eq!(gpus_named("cpu=4,node=1").unwrap(), None);
        assert_eq!(
            gpus_named("gres:gpu:0").unwrap().map(|g| g.total()),
            Some(0)
        );
        assert_eq!(total("license/matlab=1,gres/gpu=2"), 2);
    }

    #[test]
    fn malformed_input_is_a_clear_error() {
        for s in [
            "gpu:a100:4(S:0",
            "gpu:4)",
            "gpu:a100:4(S:0)x",
            "gpu:a:b:c",
            "gpu:a100:-4",
            "gres/gpu=",
            "gres/gpu=four",
            "gres/gpu=99999999999999999999999",
            "gpu:4X",
            "=4",
            "gpu:a100:8((S:0))",
            "gres/gpu:a b=1",
            "gpu:18446744073709551615T",
        ] {
            let e = Gres::parse(s).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(s), "{s:?}: {msg}");
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(s in "\\PC{0,60}") {
            let _ = Gres::parse(&s).map(|g| g.gpus().total());
        }

        #[test]
        fn never_panics_on_gres_like_text(s in "[a-z0-9:/=,;()\\-SIDX ]{0,60}") {
            let _ = Gres::parse(&s).map(|g| (g.gpus().total(), g.tres("cpu")));
        }

        #[test]
        fn node_lists_round_trip(
            types in proptest::collection::btree_map("[a-z][a-z0-9]{0,5}", 0u64..64, 1..4),
            socket in proptest::bool::ANY,
        ) {
            let s: Vec<String> = types
                .iter()
                .enumerate()
                .map(|(i, (t, n))| if socket { format!("gpu:{t}:{n}(S:{i})") } else { format!("gpu:{t}:{n}") })
                .collect();
            let g = gpus(&s.join(",")).unwrap();
            prop_assert_eq!(g.total(), types.values().sum::<u64>());
            prop_assert_eq!(g.by_type, types);
        }
    }
}
