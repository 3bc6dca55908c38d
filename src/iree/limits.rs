//! Device limits a module must respect before it reaches `iree-compile`.
//!
//! A Vulkan compute shader reads each tensor through one storage-buffer
//! binding, and a binding covers at most `maxStorageBufferRange` bytes.
//! The Vulkan specification guarantees 2^27 (128 MiB), the Android
//! baseline profile asks no more, and lavapipe and many Mali drivers report
//! exactly that. Past it the pinned IREE neither fails to compile nor fails
//! to run: the shader silently reads the wrong bytes (a 262144 × 640
//! embedding gave wrong ids at every position whose answer is a high token
//! id). So a Vulkan compile first measures every tensor type the module
//! names, kiln's own or not, and refuses one over the range.
//!
//! kiln's export keeps its graphs under the range by using a large
//! embedding or LM head in row chunks ([`crate::models::MAX_TENSOR_BYTES`],
//! `spec/vulkan-limits.md`).

use super::IreeError;
use std::path::Path;

/// `maxStorageBufferRange` assumed for every Vulkan target: 2^27 bytes,
/// the minimum the Vulkan specification requires of every device (and what
/// the Android baseline profile, lavapipe and many Mali drivers give).
pub const VULKAN_MAX_STORAGE_BUFFER_RANGE: u64 = 1 << 27;

/// `maxComputeWorkGroupCount` per dimension assumed for every Vulkan
/// target: 65535, the specification's minimum. The pinned IREE's SPIR-V
/// code for a skinny `dot_general` (a few rows against a vocabulary)
/// launches about one workgroup per result column, and lavapipe silently
/// never computes the columns past 65535, so a product wider than this is
/// refused too.
pub const VULKAN_MAX_WORKGROUP_COUNT: u64 = 65535;

/// One tensor type found in a module's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorUse {
    /// 1-based line of the text.
    pub line: usize,
    /// What carries it: `global @sym ("key")`, `%N (stablehlo.op)`, or the
    /// line's first word.
    pub what: String,
    /// The type as written, e.g. `tensor<262144x320xi32>`.
    pub ty: String,
    /// Its storage bytes (i1 and i8 take a byte, i4 half of one).
    pub bytes: u64,
}

impl TensorUse {
    /// `WHAT is TYPE, B bytes`, for a tensor over the storage-buffer range.
    fn sized(&self) -> String {
        format!("{} is {}, {} bytes", self.what, self.ty, self.bytes)
    }

    /// `WHAT gives TYPE with C columns`, for a product over the workgroup
    /// count.
    fn wide(&self) -> String {
        format!(
            "{} gives {} with {} columns",
            self.what, self.ty, self.bytes
        )
    }
}

/// The first thing in `text` past a Vulkan limit, in one line
/// (`line N: …`): an i8 or i4 weight (CPU-only), a tensor over the
/// storage-buffer range, else a product over the workgroup count. What [`check_vulkan`] refuses, said up front
/// (`kiln export`'s note).
pub fn first_vulkan_problem(text: &str) -> Option<String> {
    let limit = VULKAN_MAX_STORAGE_BUFFER_RANGE;
    if let Some(i) = text
        .lines()
        .position(|l| l.contains("util.global") && (l.contains("xi8>") || l.contains("xi4>")))
    {
        return Some(format!(
            "line {}: an i8 or i4 weight (w8a8, w8a16, w8a16e, w16a16 or w4a16 weights), a CPU-only form: \
             the Android Vulkan baseline has no 8- or 4-bit storage",
            i + 1
        ));
    }
    if let Some(u) = tensors_over(text, limit).first() {
        return Some(format!(
            "line {}: {}, over the {limit}-byte Vulkan storage-buffer range",
            u.line,
            u.sized()
        ));
    }
    products_wider_than(text, VULKAN_MAX_WORKGROUP_COUNT)
        .first()
        .map(|u| {
            format!(
                "line {}: {}, more than the {VULKAN_MAX_WORKGROUP_COUNT} Vulkan workgroups per dimension",
                u.line,
                u.wide()
            )
        })
}

/// Every statically shaped `tensor<…>` type in `text` whose storage is
/// over `limit` bytes, in text order (one per type per line).
pub fn tensors_over(text: &str, limit: u64) -> Vec<TensorUse> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut seen: Vec<&str> = Vec::new();
        let mut rest = line;
        while let Some(at) = rest.find("tensor<") {
            let body = &rest[at + "tensor<".len()..];
            let Some(end) = body.find('>') else { break };
            let ty = &rest[at..at + "tensor<".len() + end + 1];
            rest = &body[end + 1..];
            if seen.contains(&ty) {
                continue;
            }
            seen.push(ty);
            if let Some(bytes) = storage_bytes(&body[..end]) {
                if bytes > limit {
                    out.push(TensorUse {
                        line: i + 1,
                        what: carrier(line),
                        ty: ty.to_string(),
                        bytes,
                    });
                }
            }
        }
    }
    out
}

/// Every `stablehlo.dot_general` in `text` whose result has a dimension
/// over `max` ([`VULKAN_MAX_WORKGROUP_COUNT`]), in text order; `bytes`
/// holds that dimension.
pub fn products_wider_than(text: &str, max: u64) -> Vec<TensorUse> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if !line.contains("stablehlo.dot_general") {
            continue;
        }
        let Some(result) = line.rsplit("->").next() else {
            continue;
        };
        let Some(at) = result.find("tensor<") else {
            continue;
        };
        let body = &result[at + "tensor<".len()..];
        let Some(end) = body.find('>') else { continue };
        let widest = body[..end]
            .split('x')
            .filter_map(|d| d.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        if widest > max {
            out.push(TensorUse {
                line: i + 1,
                what: carrier(line),
                ty: format!("tensor<{}>", &body[..end]),
                bytes: widest,
            });
        }
    }
    out
}

/// Storage bytes of a tensor type body (`4x8xf32`, `f32`, `2x?xi8, #enc`);
/// `None` for dynamic shapes and unknown element types.
fn storage_bytes(body: &str) -> Option<u64> {
    let body = body.split(',').next()?.trim();
    let mut parts: Vec<&str> = body.split('x').collect();
    let elem = parts.pop()?;
    let bits: u64 = match elem {
        "i1" | "i8" | "ui8" | "si8" | "f8E4M3FN" | "f8E5M2" => 8,
        "i4" | "ui4" | "si4" => 4,
        "i16" | "ui16" | "si16" | "f16" | "bf16" => 16,
        "i32" | "ui32" | "si32" | "f32" | "index" => 32,
        "i64" | "ui64" | "si64" | "f64" => 64,
        _ => return None,
    };
    let mut n: u64 = 1;
    for d in parts {
        n = n.checked_mul(d.parse::<u64>().ok()?)?;
    }
    Some((n.checked_mul(bits)?).div_ceil(8))
}

/// What a line declares or defines, for the error message.
fn carrier(line: &str) -> String {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix("util.global") {
        let sym = rest
            .split('@')
            .nth(1)
            .and_then(|s| s.split_whitespace().next());
        let key = t.split("::\"").nth(1).and_then(|s| s.split('"').next());
        return match (sym, key) {
            (Some(s), Some(k)) => format!("parameter \"{k}\" (global @{s})"),
            (Some(s), None) => format!("global @{s}"),
            _ => "a global".into(),
        };
    }
    if let Some((lhs, rhs)) = t.split_once(" = ") {
        if lhs.starts_with('%') {
            let op = rhs.split([' ', '(']).next().unwrap_or("");
            return format!("{lhs} ({op})");
        }
    }
    if t.starts_with("func.func") {
        let name = t.split(['@', '(']).nth(1).unwrap_or("?");
        return format!("an argument or result of @{name}");
    }
    t.split_whitespace().next().unwrap_or("").to_string()
}

/// [`IreeError::VulkanWorkgroups`]'s message: the first product over the
/// workgroup count, and how many more there are.
pub(crate) fn workgroups_text(file: &Path, target: &str, first: &TensorUse, more: usize) -> String {
    format!(
        "{}:{}: {}, more than the {VULKAN_MAX_WORKGROUP_COUNT} workgroups per dimension \
         of Vulkan target {target} (maxComputeWorkGroupCount, the minimum every Vulkan device guarantees): IREE \
         launches about one per column and a GPU would silently leave the rest uncomputed{}",
        file.display(),
        first.line,
        first.wide(),
        if more > 0 { format!(" (and {more} more such products)") } else { String::new() }
    )
}

/// [`IreeError::VulkanStorageBuffer`]'s message: the first tensor over
/// the range, up to four more, and how many beyond those.
pub(crate) fn storage_text(file: &Path, target: &str, over: &[TensorUse]) -> String {
    let limit = VULKAN_MAX_STORAGE_BUFFER_RANGE;
    let Some(first) = over.first() else {
        return format!(
            "{}: no tensor over the storage-buffer range",
            file.display()
        );
    };
    let mut msg = format!(
        "{}:{}: {}, over the {limit}-byte storage-buffer range of Vulkan target {target} \
         (maxStorageBufferRange, the minimum every Vulkan device guarantees): a GPU would silently read wrong values",
        file.display(),
        first.line,
        first.sized()
    );
    for u in over.iter().skip(1).take(4) {
        msg.push_str(&format!("\n  also line {}: {}", u.line, u.sized()));
    }
    if over.len() > 5 {
        msg.push_str(&format!("\n  and {} more", over.len() - 5));
    }
    msg
}

/// Checks that `text` (the module in `file`) names no tensor over the
/// storage-buffer range of Vulkan target `target`, and no product wider
/// than the workgroup count: the first limit passed otherwise.
pub fn check_vulkan(text: &str, file: &Path, target: &str) -> Result<(), IreeError> {
    let over = tensors_over(text, VULKAN_MAX_STORAGE_BUFFER_RANGE);
    let wide = products_wider_than(text, VULKAN_MAX_WORKGROUP_COUNT);
    if let (None, Some(w)) = (over.first(), wide.first()) {
        return Err(IreeError::VulkanWorkgroups {
            file: file.to_path_buf(),
            target: target.to_string(),
            first: Box::new(w.clone()),
            more: wide.len() - 1,
        });
    }
    if over.is_empty() {
        return Ok(());
    }
    Err(IreeError::VulkanStorageBuffer {
        file: file.to_path_buf(),
        target: target.to_string(),
        over,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_tensor_types() {
        assert_eq!(storage_bytes("4x8xf32"), Some(128));
        assert_eq!(storage_bytes("f32"), Some(4));
        assert_eq!(storage_bytes("3xi1"), Some(3));
        assert_eq!(storage_bytes("3xi4"), Some(2));
        assert_eq!(storage_bytes("262144x320xi32"), Some(335_544_320));
        assert_eq!(storage_bytes("?x4xf32"), None);
        assert_eq!(storage_bytes("4x!quant.uniform<i8:f32, 1.0>"), None);
    }

    #[test]
    fn finds_the_oversize_global_and_op() {
        let text = "module {\n  util.global private @w = #flow.parameter.named<\"model\"::\"emb\"> : tensor<65536x1024xf32>\n  func.func @f(%arg0: tensor<4xi32>) -> tensor<4xf32> {\n    %0 = util.global.load @w : tensor<65536x1024xf32>\n    %1 = stablehlo.slice %0 [0:4, 0:1] : (tensor<65536x1024xf32>) -> tensor<4x1xf32>\n";
        let over = tensors_over(text, 1 << 27);
        assert_eq!(over.len(), 3);
        assert_eq!(over[0].what, "parameter \"emb\" (global @w)");
        assert_eq!(over[0].bytes, 1 << 28);
        assert_eq!(over[1].what, "%0 (util.global.load)");
        assert_eq!(over[2].line, 5);
        assert!(tensors_over(text, 1 << 28).is_empty());
    }

    #[test]
    fn finds_a_product_wider_than_the_workgroup_count() {
        let text = "    %3 = stablehlo.dot_general %1, %2, contracting_dims = [1] x [1] : (tensor<8x320xf32>, tensor<87424x320xf32>) -> tensor<8x87424xf32>\n    %4 = stablehlo.dot_general %1, %2, contracting_dims = [1] x [1] : (tensor<8x320xf32>, tensor<65535x320xf32>) -> tensor<8x65535xf32>\n";
        let wide = products_wider_than(text, 65535);
        assert_eq!(wide.len(), 1);
        assert_eq!((wide[0].line, wide[0].bytes), (1, 87424));
        assert_eq!(wide[0].what, "%3 (stablehlo.dot_general)");
        // What kiln export notes: the wide product when no tensor is too big.
        assert_eq!(
            first_vulkan_problem(text).unwrap(),
            "line 1: %3 (stablehlo.dot_general) gives tensor<8x87424xf32> with 87424 columns, \
             more than the 65535 Vulkan workgroups per dimension"
        );
    }
}
