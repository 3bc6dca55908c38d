//! `kiln interp`: runs an exported StableHLO module with kiln's own
//! interpreter and prints the predicted ids exactly as `kiln run` does.

use crate::error::{Error, Result};
use kiln::graph::DType;
use kiln::interp::{self, ParamSource, Tensor};
use kiln::step::SignatureError;
use std::path::{Path, PathBuf};

/// Arguments of `kiln interp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The StableHLO module (`.mlir`) to run.
    pub module: PathBuf,
    /// Parameter file (`.irpa` or `.safetensors`) holding the module's weights.
    #[arg(long, short = 'p', value_name = "FILE")]
    pub params: Option<PathBuf>,
    /// Prompt token ids, comma- or space-separated (padded with id 0 to
    /// SEQ), as `kiln run` takes them.
    #[arg(long, value_name = "IDS")]
    pub tokens: String,
    /// Sequence length; must match the module's input (default: the module's).
    #[arg(long)]
    pub seq: Option<usize>,
    /// Function to run (default: the module's first function).
    #[arg(long)]
    pub function: Option<String>,
}

/// Opens a parameter file (`.irpa`, `.safetensors` or `.gguf`) as a
/// [`ParamSource`], with kiln's own readers.
pub fn open_params(path: &Path) -> Result<Box<dyn ParamSource>> {
    Ok(Box::new(
        <dyn kiln::params::ParamSource>::open(path).map_err(kiln::interp::InterpError::from)?,
    ))
}

/// Pads `tokens` with id 0 to the length of `shape` (`[1, SEQ]` or `[SEQ]`).
pub fn token_input(tokens: &[i32], shape: &[usize]) -> Result<Tensor> {
    let seq: usize = shape.iter().product();
    if !(shape.len() == 1 || (shape.len() == 2 && shape[0] == 1)) {
        return Err(SignatureError::IdsShape {
            shape: shape.to_vec(),
        }
        .into());
    }
    if tokens.len() > seq {
        return Err(Error::Usage(format!(
            "--tokens: {} ids do not fit SEQ = {seq}",
            tokens.len()
        )));
    }
    let mut data = tokens.to_vec();
    data.resize(seq, 0);
    Ok(Tensor::i32(shape, data))
}

/// Formats predicted ids the way `kiln run` prints them: one line, spaces.
pub fn format_ids(t: &Tensor) -> Result<String> {
    let ids = t.as_i32().ok_or_else(|| SignatureError::NotIds {
        found: t.describe(),
    })?;
    Ok(ids
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" "))
}

/// Runs `kiln interp`.
pub fn run(args: Args) -> Result<i32> {
    let text = std::fs::read_to_string(&args.module).map_err(|e| Error::io(&args.module, e))?;
    let module = kiln::graph::Module::parse(&text).map_err(|e| e.with_file(&args.module))?;
    // A KV-cache module holds a prefill and a decode, not the SEQ forward.
    let is_kv = args.function.is_none()
        && module.functions.len() == 2
        && module.functions[0].name.ends_with("_prefill")
        && module.functions[1].name.ends_with("_decode");
    if is_kv {
        return Err(super::run::kv_module_error(&args.module, "interp"));
    }
    let g = module.function(args.function.as_deref())?;
    let Some(&arg0) = g.inputs().first() else {
        return Err(SignatureError::NoTokenIds {
            function: g.name.clone(),
        }
        .into());
    };
    let ty = g.ty(arg0).clone();
    if ty.dtype != DType::I32 || g.inputs().len() != 1 {
        return Err(SignatureError::Arguments {
            function: g.name.clone(),
            count: g.inputs().len(),
            first: ty,
        }
        .into());
    }
    let seq: usize = ty.shape.iter().product();
    if let Some(s) = args.seq {
        if s != seq {
            return Err(Error::Usage(format!(
                "--seq {s} does not match the module's SEQ {seq} ({ty})"
            )));
        }
    }
    let input = token_input(&super::run::parse_tokens(&args.tokens)?, &ty.shape)?;
    let empty = std::collections::HashMap::<String, Tensor>::new();
    let params: Box<dyn ParamSource> = match &args.params {
        Some(p) => open_params(p)?,
        None => {
            if g.parameters().next().is_some() {
                return Err(Error::Usage(format!(
                    "{}: the module has parameters; pass --params FILE",
                    args.module.display()
                )));
            }
            Box::new(empty)
        }
    };
    let out = interp::run(g, &[input], params.as_ref())?;
    let first = out.first().ok_or_else(|| SignatureError::NoResults {
        function: g.name.clone(),
    })?;
    println!("{}", format_ids(first)?);
    Ok(0)
}
