//! Alibaba PAI 2023 (`openb`) pod lists.
//!
//! Each pod is a job of one instance of `num_gpu` GPUs. Only whole-GPU pods
//! are replayed: pods with no GPU (`num_gpu = 0`) and GPU-sharing pods
//! (`gpu_milli < 1000`) are skipped and counted, as are pods that were never
//! scheduled (`scheduled_time` empty, phase `Pending`). A pod is submitted at
//! `creation_time` and runs for `deletion_time - scheduled_time` seconds (its
//! time on the GPUs in the original cluster; `creation_time` when the list
//! has no `scheduled_time` column).
//!
//! Lists without `creation_time`/`deletion_time` (`openb_pod_list_multigpu50.csv`
//! and the other synthetic lists) carry no arrival or duration at all, so they
//! are refused with an error rather than given invented times.

use super::{Columns, Row, Rows, Trace, TraceJob};
use crate::error::{CoreError, Result};
use crate::model::JobShape;

pub(super) fn read<R: std::io::Read>(
    cols: &Columns,
    rows: &mut Rows<R>,
    trace: &mut Trace,
    gpus_per_node: u32,
) -> Result<()> {
    let name = cols.require("name")?;
    let num_gpu = cols.require("num_gpu")?;
    let gpu_milli = cols.require("gpu_milli")?;
    for t in ["creation_time", "deletion_time"] {
        if cols.find(t).is_none() {
            return Err(CoreError::Trace {
                file: rows.file.clone(),
                line: 1,
                field: t.to_string(),
                why: format!(
                    "this pod list has no `{t}` column, so it has no arrival times or durations \
                     (e.g. openb_pod_list_multigpu50.csv); only lists with creation/deletion times, \
                     such as openb_pod_list_default.csv, can be replayed"
                ),
            });
        }
    }
    let created = cols.require("creation_time")?;
    let deleted = cols.require("deletion_time")?;
    let scheduled = cols.find("scheduled_time");
    let mut rec = csv::StringRecord::new();
    while let Some(line) = rows.next_row(&mut rec)? {
        let row = Row {
            file: &rows.file,
            line,
            rec: &rec,
            cols,
        };
        let pod = row.text("name", name)?.to_string();
        let g = row.count("num_gpu", num_gpu, 0)?;
        let milli = row.count("gpu_milli", gpu_milli, 0)?;
        if milli > 1000 {
            return Err(row.err(
                "gpu_milli",
                format!("`{milli}` is more than one GPU (1000)"),
            ));
        }
        if g == 0 {
            *trace
                .skipped
                .entry("no GPU (num_gpu = 0)".into())
                .or_default() += 1;
            continue;
        }
        if milli < 1000 {
            *trace
                .skipped
                .entry("GPU sharing (gpu_milli < 1000)".into())
                .or_default() += 1;
            continue;
        }
        let g = u32::try_from(g).map_err(|_| row.err("num_gpu", "too large"))?;
        if g > gpus_per_node {
            return Err(row.err(
                "num_gpu",
                format!("{g} GPUs do not fit a node of {gpus_per_node} GPUs"),
            ));
        }
        let submit_s = row.seconds("creation_time", created)?;
        let start = match scheduled {
            Some(i) if row.raw(i).is_empty() => {
                *trace
                    .skipped
                    .entry("never scheduled (scheduled_time empty)".into())
                    .or_default() += 1;
                continue;
            }
            Some(i) => row.seconds("scheduled_time", i)?,
            None => submit_s,
        };
        let end = row.seconds("deletion_time", deleted)?;
        if end < start {
            return Err(row.err(
                "deletion_time",
                format!("{end} is before the pod started ({start})"),
            ));
        }
        trace.jobs.push(TraceJob {
            name: pod,
            submit_s,
            duration_s: end - start,
            shape: JobShape::new(1, g),
            account: None,
            min_runtime_s: None,
            resumable: true,
            line,
        });
    }
    Ok(())
}
