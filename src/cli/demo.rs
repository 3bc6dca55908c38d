//! `kiln demo`.

/// Arguments of `kiln demo`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln demo`.
pub fn run(_args: Args) -> crate::Result<i32> {
    Err(crate::Error::Usage(
        "`kiln demo` is not implemented yet".into(),
    ))
}
