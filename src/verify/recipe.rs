//! The export a manifest's recipe records, made again for
//! `kiln verify --rebuild`.

use super::VerifyError;
use crate::export::{export, ExportOptions, KvCacheOptions, Layout, Weights};
use crate::graph::DType;
use crate::manifest::ExportRecipe;
use crate::models::Checkpoint;
use crate::stablehlo::ConstantPolicy;
use std::path::Path;

/// Exports the checkpoint at `source` again with `recipe`'s options into
/// `dir`; returns the layout of what it wrote. The error is only shown (a
/// fault's text), so any stage's will do.
pub(super) fn rebuild_export(
    source: &Path,
    recipe: &ExportRecipe,
    dir: &Path,
) -> Result<Layout, Box<dyn std::error::Error>> {
    let ckpt = Checkpoint::open(source)?;
    let opts = export_options(recipe, dir)?;
    export(&ckpt, &opts)?;
    Ok(Layout::new(dir, &recipe.name))
}

/// The export options a recipe records, writing into `dir`.
fn export_options(recipe: &ExportRecipe, dir: &Path) -> Result<ExportOptions, VerifyError> {
    let bad = |what: String| VerifyError::Recipe { what };
    let weights = |s: &str| -> Result<Weights, VerifyError> {
        s.parse().map_err(|_| bad(format!("weights form {s:?}")))
    };
    let mut weights_for = Vec::new();
    for w in &recipe.weights_for {
        let (pattern, form) = w
            .rsplit_once('=')
            .ok_or_else(|| bad(format!("weights exception {w:?}")))?;
        weights_for.push((pattern.to_string(), weights(form)?));
    }
    let scope = recipe.scope.clone();
    let constants = match recipe.constants.as_str() {
        "external" => ConstantPolicy::ExternalAlways { scope },
        "inline" => ConstantPolicy::InlineAlways,
        other => match other.strip_prefix("threshold=").map(str::parse) {
            Some(Ok(bytes)) => ConstantPolicy::SizeThreshold { bytes, scope },
            _ => return Err(bad(format!("constant policy {other:?}"))),
        },
    };
    let kv = match &recipe.kv {
        None => None,
        Some(kv) => {
            let dtype = DType::from_mlir(&kv.cache_dtype)
                .ok_or_else(|| bad(format!("cache dtype {:?}", kv.cache_dtype)))?;
            let mut o = KvCacheOptions::default()
                .prompt_len(kv.prompt_len)
                .max_context(kv.max_context)
                .cache_dtype(dtype)
                .spans(kv.spans.clone());
            o.top_k = kv.top_k;
            Some(o)
        }
    };
    Ok(ExportOptions::new(recipe.seq, dir)
        .name(recipe.name.clone())
        .function(recipe.function.clone())
        .weights(weights(&recipe.weights)?)
        .weights_for(weights_for)
        .constants(constants)
        .kv(kv)
        .max_tensor_bytes(recipe.max_tensor_bytes))
}
