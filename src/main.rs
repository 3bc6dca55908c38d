fn main() {
    std::process::exit(kiln::cli::main());
}
