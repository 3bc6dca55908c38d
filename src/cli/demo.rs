//! `kiln demo [--out DIR]`: export, compile, run and check a tiny model.

use std::path::PathBuf;

/// Arguments of `kiln demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory for the demo's files.
    #[arg(long, short = 'o', value_name = "DIR", default_value = "kiln-demo")]
    pub out: PathBuf,
}

/// Runs `kiln demo`: exit 0 on PASS, 1 on FAIL.
pub fn run(a: Args) -> kiln::Result<i32> {
    let t = std::time::Instant::now();
    let pass = crate::demo::run(&a.out)?;
    let verdict = if pass { "PASS" } else { "FAIL" };
    println!(
        "{verdict} ({:.1}s): IREE and kiln's interpreter {} the expected ids",
        t.elapsed().as_secs_f64(),
        if pass {
            "both give"
        } else {
            "do not both give"
        }
    );
    Ok(if pass { 0 } else { 1 })
}
