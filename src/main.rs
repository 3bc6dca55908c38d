//! The `kiln` binary: the command line over the kiln library.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
