//! What a module must declare: the KV pair's function signatures, the
//! executable format of each slot's target, and a signature's text.

use crate::graph::{DType, TensorType};
use crate::iree::flags::Target;
use crate::iree::inspect::FunctionSignature;
use crate::manifest::KvPair;

/// The KV pair's functions as IREE declares them: prefill `(tokens
/// [1, P] i32, start, length, K…, V…) -> (next, K…, V… [, values, ids])`
/// and decode `(token [1] i32, position, K…, V…) -> (the same)`, then
/// each attention span's prefill and decode with the same signatures. In
/// a module for Vulkan (`vulkan`), bf16 caches are i32 words of two.
pub(super) fn kv_signatures(pair: &KvPair, vulkan: bool) -> Result<Vec<FunctionSignature>, String> {
    let cache = pair.cache_type().map_err(|e| e.to_string())?;
    let cache = match vulkan {
        true => cache
            .lowered_for_vulkan()
            .ok_or_else(|| format!("KV caches {cache} with an odd head dim have no Vulkan form"))?,
        false => cache,
    }
    .to_string();
    let i32s = |shape: &[usize]| TensorType::new(DType::I32, shape).to_string();
    let caches = vec![cache; 2 * pair.cache_count];
    let mut outputs = vec![i32s(&[])];
    outputs.extend(caches.iter().cloned());
    if let Some(k) = pair.top_k {
        outputs.push(TensorType::new(DType::F32, &[k]).to_string());
        outputs.push(i32s(&[k]));
    }
    let mut prefill = vec![i32s(&[1, pair.prompt_len]), i32s(&[]), i32s(&[])];
    prefill.extend(caches.iter().cloned());
    let mut decode = vec![i32s(&[1]), i32s(&[])];
    decode.extend(caches);
    let mut pairs = vec![(pair.prefill.as_str(), pair.decode.as_str())];
    pairs.extend(
        pair.spans
            .iter()
            .map(|s| (s.prefill.as_str(), s.decode.as_str())),
    );
    Ok(pairs
        .into_iter()
        .flat_map(|(p, d)| {
            [
                FunctionSignature::new(p, prefill.clone(), outputs.clone()),
                FunctionSignature::new(d, decode.clone(), outputs.clone()),
            ]
        })
        .collect())
}

/// Whether `a` and `b` are the same kind of target (any Vulkan target is
/// one kind: a file name does not say which).
pub(super) fn same_kind(a: &Target, b: &Target) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The executable format IREE writes for `target`: the host's is this
/// machine's architecture.
pub(super) fn executable_format(target: &Target) -> &'static str {
    match target {
        Target::Host => match std::env::consts::ARCH {
            "aarch64" => "embedded-elf-arm_64",
            "arm" => "embedded-elf-arm_32",
            "riscv64" => "embedded-elf-riscv_64",
            _ => "embedded-elf-x86_64",
        },
        Target::Arm64 => "embedded-elf-arm_64",
        Target::Arm32 => "embedded-elf-arm_32",
        Target::Vulkan { .. } => "vulkan-spirv-fb",
    }
}

/// `(T, …) -> (T, …)`.
pub(super) fn signature_text(f: &FunctionSignature) -> String {
    format!("({}) -> ({})", f.inputs.join(", "), f.outputs.join(", "))
}
