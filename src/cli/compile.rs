//! `kiln compile`.

/// Arguments of `kiln compile`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln compile`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln compile` is not implemented yet".into(),
    ))
}
