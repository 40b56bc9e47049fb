//! Trace readers: the canonical CSV, the Helios/Venus sample and the Alibaba
//! PAI 2023 (`openb`) pod lists. See `docs/simulator.md` for the formats.
//!
//! The core does no I/O: every reader parses from `&str` or `impl BufRead`,
//! and takes the file name only to put it in errors. A malformed row is a
//! [`CoreError::Trace`] naming file, line and field; never a panic.

mod alibaba;
mod canonical;
mod venus;

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::error::{CoreError, Result};
use crate::model::JobShape;

/// The largest time, in seconds, a trace may give: a submission, a
/// duration, a pod's creation, scheduling or deletion time, a min runtime.
/// 1e10 s is about 317 years, beyond any real trace; a submission plus a
/// duration then stays below 2e10 s, where an `f64` still resolves a few
/// microseconds, so every sum the simulators make is exact enough and
/// their clocks always move forward. The policy simulator also refuses
/// jobs ending (submission plus run) past it.
pub const MAX_TRACE_S: Seconds = 1e10;

/// One job of a trace: `w` instances of `g` GPUs submitted at `submit_s`,
/// running for `duration_s` once started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceJob {
    /// The job's id as written in the file (Venus ids look like `394948#2`).
    pub name: String,
    pub submit_s: Seconds,
    pub duration_s: Seconds,
    pub shape: JobShape,
    /// Owning account (canonical format only).
    pub account: Option<String>,
    /// Minimum runtime the job asked for (canonical format only; carried for
    /// the protection/preemption replay, not used by the placement simulator).
    pub min_runtime_s: Option<Seconds>,
    /// May the scheduler migrate it? (`false`: planned around as immovable.)
    pub resumable: bool,
    /// 1-based line of the row in its file.
    pub line: u64,
}

/// The formats [`read`] understands.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// `job_id,submit_s,duration_s,num_inst,gpus_per_inst[,account,min_runtime_s,resumable]`
    Canonical,
    /// Helios/Venus sample: `job_id,arrival_s,service_sec,gpu_count`.
    Venus,
    /// Alibaba PAI 2023 `openb_pod_list_*.csv` with creation/deletion times.
    Alibaba,
}

impl TraceFormat {
    pub const NAMES: &'static [&'static str] = &["canonical", "venus", "alibaba"];

    pub fn parse_name(name: &str) -> Result<Self> {
        match name {
            "canonical" => Ok(Self::Canonical),
            "venus" => Ok(Self::Venus),
            "alibaba" => Ok(Self::Alibaba),
            other => Err(CoreError::Invalid(format!(
                "unknown trace format `{other}`; expected one of: {}",
                Self::NAMES.join(", ")
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Canonical => "canonical",
            Self::Venus => "venus",
            Self::Alibaba => "alibaba",
        }
    }

    /// Recognises a format by its header line (column names, any order).
    pub fn detect(header: &str) -> Option<Self> {
        let cols: Vec<&str> = header
            .trim()
            .split(',')
            .map(|c| c.trim().trim_matches('"'))
            .collect();
        let has = |c: &str| cols.contains(&c);
        if has("submit_s") && has("num_inst") && has("gpus_per_inst") {
            Some(Self::Canonical)
        } else if has("arrival_s") && has("service_sec") && has("gpu_count") {
            Some(Self::Venus)
        } else if has("num_gpu") && has("gpu_milli") {
            Some(Self::Alibaba)
        } else {
            None
        }
    }
}

/// How to read a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadOptions {
    /// `None`: detect from the header.
    pub format: Option<TraceFormat>,
    /// GPUs per node of the cluster the trace is for: Venus jobs larger than
    /// a node are split into whole-node instances of this size, and no
    /// instance may be larger.
    pub gpus_per_node: u32,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            format: None,
            gpus_per_node: 8,
        }
    }
}

/// A parsed trace: jobs in file order, plus rows deliberately left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub format: TraceFormat,
    pub jobs: Vec<TraceJob>,
    /// Rows left out by rule (not errors), by reason, e.g. Alibaba pods with a
    /// fractional GPU.
    pub skipped: BTreeMap<String, u64>,
}

impl Trace {
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }
}

/// Reads a trace from text. `file` is only used in error messages.
pub fn read_str(text: &str, file: &str, opts: &ReadOptions) -> Result<Trace> {
    read(text.as_bytes(), file, opts)
}

/// Reads a trace from any buffered reader. `file` is only used in error
/// messages.
pub fn read(reader: impl BufRead, file: &str, opts: &ReadOptions) -> Result<Trace> {
    if !matches!(opts.gpus_per_node, 1 | 2 | 4 | 8) {
        return Err(CoreError::BadNodeCapacity(opts.gpus_per_node));
    }
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(reader);
    let header = rdr.headers().map_err(|e| csv_error(file, &e))?.clone();
    let format = match opts.format {
        Some(f) => f,
        None => {
            let line: Vec<&str> = header.iter().collect();
            TraceFormat::detect(&line.join(",")).ok_or_else(|| CoreError::Trace {
                file: file.to_string(),
                line: 1,
                field: "header".into(),
                why: format!(
                    "cannot recognise the trace format from header `{}`; expected a canonical \
                     (job_id,submit_s,duration_s,num_inst,gpus_per_inst), Venus \
                     (job_id,arrival_s,service_sec,gpu_count) or Alibaba (name,...,num_gpu,gpu_milli,...) header",
                    line.join(",")
                ),
            })?
        }
    };
    let cols = Columns::new(file, &header);
    let mut rows = Rows {
        rdr,
        file: file.to_string(),
    };
    let mut trace = Trace {
        format,
        jobs: Vec::new(),
        skipped: BTreeMap::new(),
    };
    match format {
        TraceFormat::Canonical => {
            canonical::read(&cols, &mut rows, &mut trace, opts.gpus_per_node)?
        }
        TraceFormat::Venus => venus::read(&cols, &mut rows, &mut trace, opts.gpus_per_node)?,
        TraceFormat::Alibaba => alibaba::read(&cols, &mut rows, &mut trace, opts.gpus_per_node)?,
    }
    Ok(trace)
}

fn csv_error(file: &str, e: &csv::Error) -> CoreError {
    let line = e.position().map(|p| p.line()).unwrap_or(0);
    let why = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => {
            format!("row has {len} fields, the header has {expected_len}")
        }
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_string(),
        _ => e.to_string(),
    };
    CoreError::Trace {
        file: file.to_string(),
        line,
        field: "-".into(),
        why,
    }
}

/// Column positions by name.
struct Columns {
    file: String,
    names: Vec<String>,
}

impl Columns {
    fn new(file: &str, header: &csv::StringRecord) -> Self {
        Self {
            file: file.to_string(),
            names: header.iter().map(str::to_string).collect(),
        }
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    fn require(&self, name: &str) -> Result<usize> {
        self.find(name).ok_or_else(|| CoreError::Trace {
            file: self.file.clone(),
            line: 1,
            field: name.to_string(),
            why: format!("missing column `{name}` in the header"),
        })
    }
}

/// Row iterator that keeps the line number for errors.
struct Rows<R: std::io::Read> {
    rdr: csv::Reader<R>,
    file: String,
}

impl<R: std::io::Read> Rows<R> {
    /// Next record with its 1-based line, or `None` at the end.
    fn next_row(&mut self, rec: &mut csv::StringRecord) -> Result<Option<u64>> {
        match self.rdr.read_record(rec) {
            Ok(true) => Ok(Some(rec.position().map(|p| p.line()).unwrap_or(0))),
            Ok(false) => Ok(None),
            Err(e) => Err(csv_error(&self.file, &e)),
        }
    }
}

/// One row being parsed: typed field access with file/line/field errors.
struct Row<'a> {
    file: &'a str,
    line: u64,
    rec: &'a csv::StringRecord,
    cols: &'a Columns,
}

impl<'a> Row<'a> {
    fn err(&self, field: &str, why: impl Into<String>) -> CoreError {
        CoreError::Trace {
            file: self.file.to_string(),
            line: self.line,
            field: field.to_string(),
            why: why.into(),
        }
    }

    fn raw(&self, idx: usize) -> &'a str {
        self.rec.get(idx).unwrap_or("")
    }

    fn text(&self, field: &str, idx: usize) -> Result<&'a str> {
        let v = self.raw(idx);
        if v.is_empty() {
            return Err(self.err(field, "empty value"));
        }
        Ok(v)
    }

    /// A finite, non-negative number of seconds, at most [`MAX_TRACE_S`].
    fn seconds(&self, field: &str, idx: usize) -> Result<Seconds> {
        let v = self.text(field, idx)?;
        let x: f64 = v
            .parse()
            .map_err(|_| self.err(field, format!("`{v}` is not a number")))?;
        if !x.is_finite() || x < 0.0 {
            return Err(self.err(field, format!("`{v}` must be a finite number >= 0")));
        }
        if x > MAX_TRACE_S {
            return Err(self.err(
                field,
                format!(
                    "`{v}` s is more than {MAX_TRACE_S:e} s (about 317 years), the most a trace may give"
                ),
            ));
        }
        Ok(x)
    }

    /// A whole number, at least `min`.
    fn count(&self, field: &str, idx: usize, min: u64) -> Result<u64> {
        let v = self.text(field, idx)?;
        let x: u64 = v
            .parse()
            .map_err(|_| self.err(field, format!("`{v}` is not a whole number")))?;
        if x < min {
            return Err(self.err(field, format!("`{v}` must be at least {min}")));
        }
        Ok(x)
    }

    fn optional_col(&self, name: &str) -> Option<&'a str> {
        self.cols
            .find(name)
            .map(|i| self.raw(i))
            .filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests;
