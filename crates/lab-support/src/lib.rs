//! What the lab tests of every crate share (`compass`'s replay labs, the
//! select plugin's labs, the budget service's labs): the Slurm release a
//! build is for and where it is installed, whether this host can run a lab,
//! the plugin libraries `cargo test` built, and `contrib/slurm-lab.sh`
//! (`up` with each crate's settings, `down` when a lab is dropped). Each
//! crate keeps its own `Lab` on top of these; a dev-dependency only, never
//! published.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root (`contrib/`, `etc/`, ...).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether this process runs as root (the labs need it: they start munge,
/// slurmctld and slurmd).
pub fn is_root() -> bool {
    extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

/// The Slurm release a build is for, as the labs run it (`LAB_SLURM` of
/// `contrib/slurm-lab.sh`): "22.05" (Debian 12's, in `/usr`) or "24.11"
/// (built into a prefix by `contrib/build-slurm.sh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release(&'static str);

impl Release {
    /// From the version a build read from Slurm's headers
    /// (`slurm_sys::RELEASE`, `COMPASS_SLURM_VERSION`): its first five
    /// characters, `22.05.8` -> `22.05`.
    pub fn of(version: &'static str) -> Release {
        Release(version.get(..5).unwrap_or(version))
    }

    pub fn name(self) -> &'static str {
        self.0
    }

    /// Where it is installed: `None` for Debian 12's 22.05 (`/usr`), else
    /// `LAB_SLURM_PREFIX` or `/opt/slurm-<release>`.
    pub fn prefix(self) -> Option<PathBuf> {
        (self.0 != "22.05").then(|| {
            std::env::var_os("LAB_SLURM_PREFIX")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(format!("/opt/slurm-{}", self.0)))
        })
    }

    /// A Slurm client (`sbatch`, `squeue`, ...) of this release.
    pub fn client(self, prog: &str) -> PathBuf {
        match self.prefix() {
            Some(p) => p.join("bin").join(prog),
            None => PathBuf::from(prog),
        }
    }

    /// Why this host cannot run a lab of this release, if it cannot: not
    /// root, or the release's daemons not installed (and what to run).
    pub fn unavailable(self) -> Option<String> {
        if !is_root() {
            return Some("needs root (starts munge, slurmctld and slurmd)".into());
        }
        let (bins, how) = match self.prefix() {
            None => (
                vec![
                    PathBuf::from("/usr/sbin/slurmctld-wlm"),
                    PathBuf::from("/usr/sbin/slurmd-wlm"),
                ],
                "contrib/install-slurm-deps.sh".to_string(),
            ),
            Some(p) => (
                vec![p.join("sbin/slurmctld"), p.join("sbin/slurmd")],
                format!("contrib/build-slurm.sh {}", self.0),
            ),
        };
        bins.iter()
            .find(|bin| !bin.exists())
            .map(|bin| format!("{} missing: run {how}", bin.display()))
    }

    /// `contrib/slurm-lab.sh CMD DIR` of this release (`LAB_SLURM`), with
    /// `env` (`LAB_PORT_BASE`, `LAB_NODES`, plugins, ...).
    pub fn slurm_lab<K, V>(
        self,
        cmd: &str,
        dir: &Path,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Output
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        Command::new(repo_root().join("contrib/slurm-lab.sh"))
            .arg(cmd)
            .arg(dir)
            .env("LAB_SLURM", self.0)
            .envs(env)
            .output()
            .expect("run contrib/slurm-lab.sh")
    }

    /// What every lab does when dropped (panics included): `slurm-lab.sh
    /// down DIR` (its failure on stderr), then removes DIR unless [`keep`]
    /// says to keep it.
    ///
    /// A lab about to be removed is killed at once (`LAB_DOWN=kill`: no
    /// job cancelled, no state saved, about 3.5 s less per lab); a kept one
    /// is stopped as an admin would, its state saved for inspection.
    pub fn down(self, dir: &Path) {
        let how = if keep() { "" } else { "kill" };
        let out = self.slurm_lab("down", dir, [("LAB_DOWN", how)]);
        if !out.status.success() {
            eprintln!("lab down: {}", lossy(&out.stderr));
        }
        if keep() {
            eprintln!("lab kept (COMPASS_KEEP_LAB): {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Keep the labs (and what a test wrote beside them) for inspection:
/// `COMPASS_KEEP_LAB=1` when the test fails, `COMPASS_KEEP_LAB=always`
/// also when it passes.
pub fn keep() -> bool {
    match std::env::var("COMPASS_KEEP_LAB") {
        Ok(v) => v == "always" || std::thread::panicking(),
        Err(_) => false,
    }
}

/// A plugin library built by this `cargo test` (a cdylib dev-dependency):
/// the newest copy next to the test executable (cargo leaves it in deps/;
/// the profile directory may hold an older copy from a `cargo build`).
pub fn artifact(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let deps = exe.parent().expect("deps dir");
    [
        deps.to_path_buf(),
        deps.parent().expect("profile dir").to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join(name))
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .unwrap_or_else(|| {
        panic!(
            "{name} is not built next to {}: run `cargo build -p compass-select -p compass-spank` \
             (cargo test --workspace builds it)",
            exe.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_the_first_five_characters_of_the_version() {
        assert_eq!(Release::of("22.05.8").name(), "22.05");
        assert_eq!(Release::of("24.11.1").name(), "24.11");
        assert_eq!(Release::of("24.1").name(), "24.1");
        assert_eq!(Release::of("22.05.8").prefix(), None);
        assert_eq!(
            Release::of("22.05.8").client("sbatch"),
            PathBuf::from("sbatch")
        );
    }

    #[test]
    fn the_repo_root_holds_the_lab_script() {
        assert!(repo_root().join("contrib/slurm-lab.sh").exists());
    }
}
