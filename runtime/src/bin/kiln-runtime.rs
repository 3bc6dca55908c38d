//! `kiln-runtime`: kiln's runtime as a program, for a machine (or an
//! emulator) that runs a module on behalf of another process.
//! `kiln-runtime serve …` answers requests on stdin (see
//! `kiln_runtime::serve`); `kiln-runtime --version` prints the version.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => {
            let spec = match kiln_runtime::serve::ServeSpec::parse(&args[1..]) {
                Ok(s) => s,
                Err(e) => {
                    println!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let stdin = std::io::stdin().lock();
            let stdout = std::io::stdout().lock();
            match kiln_runtime::serve::serve(&spec, stdin, stdout) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(1),
            }
        }
        Some("--version") => {
            println!("kiln-runtime {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: kiln-runtime serve MODULE [--param SCOPE=PATH] [--device D] [--task-groups N] (--function NAME | --kv PREFILL,DECODE… --cache DTYPE:SHAPE…)");
            ExitCode::from(2)
        }
    }
}
