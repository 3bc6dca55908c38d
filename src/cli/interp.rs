//! `kiln interp`.

/// Arguments of `kiln interp`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln interp`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln interp` is not implemented yet".into(),
    ))
}
