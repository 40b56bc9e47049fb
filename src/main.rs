//! `compass`: the command-line driver of the compass GPU scheduler.
//!
//! Thin clap dispatcher: each subcommand lives in its own module with an
//! `Args` struct and a `run` function. Adding one is one enum variant and one
//! match arm.

mod bench;
mod chart;
mod compare;
mod error;
mod generate;
mod policy;
mod progress;
mod replay;
mod simulate;
mod status;
mod tracefile;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Version line: the crate version and the Slurm version the plugins were
/// built for (from slurm_version.h at build time, "none" without Slurm).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (Slurm ",
    env!("COMPASS_SLURM_VERSION"),
    ")"
);

/// compass: a GPU scheduler for Slurm clusters (COMPASS-ABS placement).
#[derive(Parser)]
#[command(name = "compass", version = VERSION, about, long_about = None,
          after_help = compass_budget::cli::EXIT_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    // Boxed: its options (placement and policy simulator) dwarf the others.
    Simulate(Box<simulate::Args>),
    Compare(compare::Args),
    Bench(bench::Args),
    /// Show the live placement state of select/cons_tres_compass (per node, SIF).
    Status(status::Args),
    /// Manage GPU budgets through compass-budgetd (show, set-share, add, move, remove, import, export, audit).
    #[command(after_help = compass_budget::cli::EXIT_HELP)]
    Budget(compass_budget::cli::BudgetArgs),
    /// Explain a job's place in the fair-share queue (or its protection), or all of yours (--me).
    #[command(after_help = compass_budget::cli::EXIT_HELP)]
    Why(compass_budget::cli::WhyArgs),
    Replay(replay::Args),
    /// Mark Slurm nodes faulty or repaired through compass-budgetd (admins), or list them.
    #[command(after_help = compass_budget::cli::EXIT_HELP)]
    Node(compass_budget::cli::NodeArgs),
    /// Write a workload shaped like the published budget design's (seeded):
    /// a canonical trace and a budget tree for `simulate --budgets`.
    Workload(policy::WorkloadArgs),
    /// Write the manual pages (compass.1 and one per subcommand).
    Man(generate::ManArgs),
    /// Print a shell completion script (bash, zsh, fish, ...).
    Completions(generate::CompletionsArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("COMPASS_LOG")
                // rustls-platform-verifier logs a refused certificate at
                // error level; the CLI's own message already says why.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,rustls_platform_verifier=off")
                }),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(*args),
        Command::Compare(args) => compare::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Status(args) => status::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Workload(args) => policy::run_workload(args),
        Command::Man(args) => generate::run_man(args, Cli::command()),
        Command::Completions(args) => generate::run_completions(args, Cli::command()),
        Command::Node(a) => compass_budget::cli::run_node(&a).map_err(Into::into),
        Command::Budget(args) => compass_budget::cli::run_budget(&args).map_err(Into::into),
        Command::Why(args) => compass_budget::cli::run_why(&args).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compass: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
