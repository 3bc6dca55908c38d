//! `kiln run`.

/// Arguments of `kiln run`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln run`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln run` is not implemented yet".into(),
    ))
}
