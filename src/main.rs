//! The `kiln` binary: the command line over the kiln library.

mod cli;
mod demo;

fn main() {
    std::process::exit(cli::main());
}
