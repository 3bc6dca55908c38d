//! `kiln params`.

/// Arguments of `kiln params`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln params`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln params` is not implemented yet".into(),
    ))
}
