//! Adopting what the resource manager did: jobs placed by Slurm, and GPUs
//! used outside the `w x g` model.

use super::{AdoptOutcome, CompassEngine, Dest, Guest, JobMeta, NodeKind};
use crate::error::{CoreError, Result};
use crate::model::{slot_width, InstanceRef, JobId, JobRequest, NodeId};

impl CompassEngine {
    // ----- adopting what the resource manager did -------------------------

    /// Records a job exactly where the resource manager put it (`nodes[k]`
    /// hosts instance `k`), whether or not the engine planned it so. Each
    /// instance takes its ABS role on that node when it can (anchor, filler,
    /// pool member) and is a guest otherwise. Does not run Compact.
    pub fn adopt(&mut self, job: &JobRequest, nodes: &[NodeId]) -> Result<AdoptOutcome> {
        self.check_new(job)?;
        if nodes.len() != job.shape.instances as usize {
            return Err(CoreError::BadLayout {
                job: job.id,
                why: format!(
                    "{} nodes given for {} instances",
                    nodes.len(),
                    job.shape.instances
                ),
            });
        }
        let planned = self.plan(job, None)?;
        self.keep_all_trials();
        self.record_job(job, nodes.to_vec())?;
        let g = job.shape.gpus;
        for (k, &n) in nodes.iter().enumerate() {
            let inst = InstanceRef {
                job: job.id,
                index: k as u32,
            };
            let dest = self.role_on(n, g);
            self.install(inst, g, dest);
        }
        let matched = planned.is_some_and(|mut p| {
            let mut a = nodes.to_vec();
            p.sort_unstable();
            a.sort_unstable();
            p == a
        });
        if matched {
            Ok(AdoptOutcome::Matched)
        } else {
            self.divergences += 1;
            Ok(AdoptOutcome::Diverged)
        }
    }

    /// The best ABS role for an instance of `g` GPUs that must sit on `n`.
    pub(super) fn role_on(&self, n: NodeId, g: u32) -> Dest {
        let st = &self.nodes[n as usize];
        match (st.kind(), g >= 2) {
            (NodeKind::Empty, true) => Dest::NewSlot(n),
            (NodeKind::Empty, false) => Dest::Pool(n),
            (NodeKind::Slotted, true) if st.unprofiled(self.cap) >= slot_width(g) => {
                Dest::NewSlot(n)
            }
            (NodeKind::Slotted, false) => match st.slots.iter().find(|s| s.vacancy() > 0) {
                Some(s) => Dest::Filler(n, s.anchor),
                None => Dest::Guest(n),
            },
            (NodeKind::Pool, false) => Dest::Pool(n),
            _ => Dest::Guest(n),
        }
    }

    /// Records GPUs used by a job outside the `w x g` model (e.g. `--gpus=3`
    /// spread over nodes): immovable guests, never migrated.
    pub fn adopt_foreign(&mut self, job: JobId, per_node_gpus: &[(NodeId, u32)]) -> Result<()> {
        if self.meta.contains_key(&job) {
            return Err(CoreError::DuplicateJob(job));
        }
        self.keep_all_trials();
        self.occ.add_foreign(job, per_node_gpus)?;
        let running = self.occ.job(job).expect("just added").clone();
        for (k, (&n, &g)) in running.nodes.iter().zip(&running.gpus).enumerate() {
            let inst = InstanceRef {
                job,
                index: k as u32,
            };
            self.node_mut(n).guests.push(Guest {
                instance: inst,
                gpus: g,
                foreign: true,
                settled: false,
            });
            self.reindex(n);
        }
        self.meta.insert(
            job,
            JobMeta {
                gpus: 0,
                movable: false,
                tidy_held: false,
                foreign: true,
            },
        );
        Ok(())
    }
}
