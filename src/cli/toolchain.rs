//! `kiln toolchain`.

/// Arguments of `kiln toolchain`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln toolchain`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln toolchain` is not implemented yet".into(),
    ))
}
