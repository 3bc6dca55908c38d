//! `kiln export`.

/// Arguments of `kiln export`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln export`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln export` is not implemented yet".into(),
    ))
}
