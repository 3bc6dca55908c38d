//! `kiln package`.

/// Arguments of `kiln package`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln package`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln package` is not implemented yet".into(),
    ))
}
