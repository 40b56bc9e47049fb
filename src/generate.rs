//! `compass man` and `compass completions SHELL`: the manual pages and the
//! shell completions, generated from the same clap definitions as `--help`
//! (shipped in the `compass` package by contrib/build-debs.sh).

use std::path::PathBuf;

use crate::error::{CliError, Result};

/// Write the manual pages (roff): compass.1 and one page per subcommand.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write compass.1 and one page per subcommand (compass-budget.1,
    /// compass-budget-show.1, ...) into DIR; without it, print compass.1
    /// on stdout (`compass man | man -l -`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Print a shell completion script on stdout.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash (install as
    /// /usr/share/bash-completion/completions/compass), zsh (_compass in a
    /// directory of $fpath), fish (compass.fish), elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// Runs `compass man`.
pub fn run_man(args: ManArgs, cmd: clap::Command) -> Result<()> {
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| CliError::io(dir.display(), e))?;
            clap_mangen::generate_to(cmd, &dir).map_err(|e| CliError::io(dir.display(), e))
        }
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout().lock())
            .map_err(|e| CliError::io("stdout", e)),
    }
}

/// Runs `compass completions SHELL`.
pub fn run_completions(args: CompletionsArgs, mut cmd: clap::Command) -> Result<()> {
    clap_complete::generate(args.shell, &mut cmd, "compass", &mut std::io::stdout());
    Ok(())
}
