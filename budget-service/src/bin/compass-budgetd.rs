//! `compass-budgetd --config FILE [--db PATH] [--listen ADDR]`: the budget
//! service. All logic lives in the library ([`compass_budget::server`]).

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = compass_budget::server::DaemonArgs::parse();
    let journal = compass_budget::logging::init();
    match compass_budget::server::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if journal {
                // stdout is the journal: one error-priority line there.
                tracing::error!("compass-budgetd: {e}");
            } else {
                eprintln!("compass-budgetd: {e}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
