//! `compass-budgetd --config FILE [--db PATH] [--listen ADDR]`: the budget
//! service. All logic lives in the library ([`compass_budget::server`]).

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = compass_budget::server::DaemonArgs::parse();
    tracing_subscriber::fmt()
        // Plain text when the output is the journal or a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match compass_budget::server::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compass-budgetd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
