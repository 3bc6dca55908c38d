//! `kiln generate`.

/// Arguments of `kiln generate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln generate`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln generate` is not implemented yet".into(),
    ))
}
