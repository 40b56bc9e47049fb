//! Our canonical CSV: `job_id,submit_s,duration_s,num_inst,gpus_per_inst`
//! plus the optional columns `account,min_runtime_s,resumable`.

use std::collections::BTreeMap;

use super::{Columns, Row, Rows, Trace, TraceJob};
use crate::error::Result;
use crate::model::JobShape;

pub(super) fn read<R: std::io::Read>(
    cols: &Columns,
    rows: &mut Rows<R>,
    trace: &mut Trace,
    gpus_per_node: u32,
) -> Result<()> {
    let id = cols.require("job_id")?;
    let submit = cols.require("submit_s")?;
    let duration = cols.require("duration_s")?;
    let inst = cols.require("num_inst")?;
    let gpus = cols.require("gpus_per_inst")?;
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut rec = csv::StringRecord::new();
    while let Some(line) = rows.next_row(&mut rec)? {
        let row = Row {
            file: &rows.file,
            line,
            rec: &rec,
            cols,
        };
        let name = row.text("job_id", id)?.to_string();
        if let Some(first) = seen.insert(name.clone(), line) {
            return Err(row.err(
                "job_id",
                format!("duplicate job id `{name}` (first on line {first})"),
            ));
        }
        let submit_s = row.seconds("submit_s", submit)?;
        let duration_s = row.seconds("duration_s", duration)?;
        let w = row.count("num_inst", inst, 1)?;
        let g = row.count("gpus_per_inst", gpus, 1)?;
        let w = u32::try_from(w).map_err(|_| row.err("num_inst", "too large"))?;
        let g = u32::try_from(g).map_err(|_| row.err("gpus_per_inst", "too large"))?;
        if g > gpus_per_node {
            return Err(row.err(
                "gpus_per_inst",
                format!("{g} GPUs do not fit a node of {gpus_per_node} GPUs"),
            ));
        }
        let min_runtime_s = match row.optional_col("min_runtime_s") {
            None => None,
            Some(_) => Some(row.seconds("min_runtime_s", cols.find("min_runtime_s").unwrap_or(0))?),
        };
        let resumable = match row.optional_col("resumable") {
            None => true,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "y" => true,
                "0" | "false" | "no" | "n" => false,
                _ => {
                    return Err(row.err(
                        "resumable",
                        format!("`{v}` is not a boolean (true/false/1/0/yes/no)"),
                    ))
                }
            },
        };
        trace.jobs.push(TraceJob {
            name,
            submit_s,
            duration_s,
            shape: JobShape::new(w, g),
            account: row.optional_col("account").map(str::to_string),
            min_runtime_s,
            resumable,
            line,
        });
    }
    Ok(())
}
