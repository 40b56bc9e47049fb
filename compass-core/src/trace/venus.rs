//! The Helios/Venus sample: `job_id,arrival_s,service_sec,gpu_count`.
//!
//! A job of `g` GPUs on nodes of `G` GPUs becomes, exactly:
//! - `g <= G`: one instance of `g` GPUs;
//! - `g > G`: `ceil(g / G)` instances of `G` GPUs (whole nodes). When `G`
//!   does not divide `g` (12 or 14 GPUs in the sample) the job is rounded up
//!   to whole nodes, as a gang job spanning nodes would be scheduled.

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
    let arrival = cols.require("arrival_s")?;
    let service = cols.require("service_sec")?;
    let gpus = cols.require("gpu_count")?;
    let mut rec = csv::StringRecord::new();
    while let Some(line) = rows.next_row(&mut rec)? {
        let row = Row {
            file: &rows.file,
            line,
            rec: &rec,
            cols,
        };
        let name = row.text("job_id", id)?.to_string();
        let submit_s = row.seconds("arrival_s", arrival)?;
        let duration_s = row.seconds("service_sec", service)?;
        let g = row.count("gpu_count", gpus, 1)?;
        let g = u32::try_from(g).map_err(|_| row.err("gpu_count", "too large"))?;
        trace.jobs.push(TraceJob {
            name,
            submit_s,
            duration_s,
            shape: venus_shape(g, gpus_per_node),
            account: None,
            min_runtime_s: None,
            resumable: true,
            line,
        });
    }
    Ok(())
}

/// The instance shape of a Venus job of `g` GPUs on nodes of `gpus_per_node`.
pub fn venus_shape(g: u32, gpus_per_node: u32) -> JobShape {
    if g <= gpus_per_node {
        JobShape::new(1, g)
    } else {
        JobShape::new(g.div_ceil(gpus_per_node), gpus_per_node)
    }
}
