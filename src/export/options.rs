//! What an export is asked for: [`ExportOptions`], how the weights are
//! stored ([`Weights`]) and the KV-cache pair's shapes ([`KvCacheOptions`]).

use crate::graph::DType;
use crate::params::gguf::GgmlType;
use crate::stablehlo::ConstantPolicy;
use std::path::PathBuf;

/// Options of [`export`](super::export()): [`ExportOptions::new`] (or `default()`) and the
/// setters, or assign the `pub` fields of a `let mut` value.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExportOptions {
    /// Fixed sequence length.
    pub seq: usize,
    /// Output directory (created when missing).
    pub out_dir: PathBuf,
    /// Base name of the files; default: the checkpoint's name.
    pub name: Option<String>,
    /// Exported function name; default: the name, made a valid identifier.
    pub function: Option<String>,
    /// How the weights are stored: one dtype, or `keep` (a GGUF's own
    /// types, block-quantized matrices in kiln's block form).
    pub weights: Weights,
    /// Per-tensor exceptions to `weights`: (PATTERN, form) for every tensor
    /// whose HF name contains PATTERN, the last match winning
    /// (`--weights-for`).
    pub weights_for: Vec<(String, Weights)>,
    /// Constant materialization policy (carries the parameter scope).
    pub constants: ConstantPolicy,
    /// Receives one [`Unit::Tensors`](crate::progress::Unit) step,
    /// `writing weights` (nothing is reported when `None`).
    pub progress: Option<crate::progress::SharedProgress>,
    /// Also write the KV-cache pair `<name>-kv-gen.mlir` (prefill +
    /// decode over the same parameters).
    pub kv: Option<KvCacheOptions>,
    /// The largest tensor the graphs may bind, in bytes
    /// ([`crate::DecoderConfig::MAX_TENSOR_BYTES`], Vulkan's storage-buffer range,
    /// by default): a larger embedding or LM head is used in row chunks.
    pub max_tensor_bytes: u64,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            seq: 64,
            out_dir: PathBuf::from("."),
            name: None,
            function: None,
            weights: Weights::Dtype(DType::BF16),
            weights_for: Vec::new(),
            constants: ConstantPolicy::default(),
            progress: None,
            kv: None,
            max_tensor_bytes: crate::models::MAX_TENSOR_BYTES,
        }
    }
}

impl ExportOptions {
    /// The defaults with sequence length `seq` and output directory `out_dir`.
    pub fn new(seq: usize, out_dir: impl Into<PathBuf>) -> Self {
        ExportOptions {
            seq,
            out_dir: out_dir.into(),
            ..Default::default()
        }
    }

    /// Sets the fixed sequence length.
    pub fn seq(mut self, seq: usize) -> Self {
        self.seq = seq;
        self
    }

    /// Sets the output directory.
    pub fn out_dir(mut self, out_dir: impl Into<PathBuf>) -> Self {
        self.out_dir = out_dir.into();
        self
    }

    /// Sets the base name of the files (default: the checkpoint's name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the exported function name (default: from the name).
    pub fn function(mut self, function: impl Into<String>) -> Self {
        self.function = Some(function.into());
        self
    }

    /// Sets how the weights are stored (a [`Weights`] or a [`DType`]).
    pub fn weights(mut self, weights: impl Into<Weights>) -> Self {
        self.weights = weights.into();
        self
    }

    /// Sets the per-tensor exceptions to the weights' form.
    pub fn weights_for(mut self, weights_for: Vec<(String, Weights)>) -> Self {
        self.weights_for = weights_for;
        self
    }

    /// Sets the constant materialization policy.
    pub fn constants(mut self, constants: ConstantPolicy) -> Self {
        self.constants = constants;
        self
    }

    /// Sets the progress receiver (`None`: nothing is reported).
    pub fn progress(
        mut self,
        progress: impl Into<Option<crate::progress::SharedProgress>>,
    ) -> Self {
        self.progress = progress.into();
        self
    }

    /// Sets the KV-cache pair to write too (`None`: no pair).
    pub fn kv(mut self, kv: impl Into<Option<KvCacheOptions>>) -> Self {
        self.kv = kv.into();
        self
    }

    /// Sets the largest tensor the graphs may bind, in bytes.
    pub fn max_tensor_bytes(mut self, max_tensor_bytes: u64) -> Self {
        self.max_tensor_bytes = max_tensor_bytes;
        self
    }
}

/// How [`export`](super::export()) stores the weights (`kiln export --weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    /// Every weight widened and stored in this dtype: bf16, f16 or f32.
    Dtype(DType),
    /// Every matrix of any checkpoint quantized to Q8_0 or Q4_0 with
    /// llama.cpp's reference rounding (bit for bit `gguf.quants.quantize`)
    /// and stored in kiln's block form; vectors (norms, biases) as bf16.
    Quantize(GgmlType),
    /// Every tensor of a GGUF checkpoint in its own type: block-quantized
    /// matrices (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) repacked
    /// exactly into kiln's block form (`spec/quantized-weights.md`) and
    /// widened in the graph; f32, f16 and bf16 tensors as they are.
    Keep,
    /// Every matrix as i8 codes with one f32 scale per row, and every
    /// product with such a matrix taken in i8 × i8 → i32 after rounding
    /// its activations to i8, one scale per row of the activations
    /// ([`crate::graph::Graph::linear_w8a8`]); vectors as bf16. Lossy
    /// twice, and the fastest form on CPUs (IREE's i8 matmul kernels);
    /// CPU targets only (`spec/quantized-weights.md`).
    W8A8,
    /// The `w8a8` archive (i8 codes, one f32 scale per row), and every
    /// product takes its activations as two i8 terms per row, stacked into
    /// one i8 × i8 → i32 product ([`crate::graph::Graph::linear_w8a16`]):
    /// only the weights' rounding is lossy, for about w8a8's decode time
    /// (one read of the weights) and twice its prefill arithmetic. CPU
    /// targets only (`spec/quantized-weights.md`).
    W8A16,
    /// `w8a16`, with the embedding table's rows in two i8 terms for its
    /// gathers: each row's rounding error is stored as a second i8 part
    /// (`NAME.q8lo`), and a gather widens `scale·(q + lo/254)`, about 15
    /// bits; a tied head's product is `w8a16`'s (one read of the codes).
    /// The other matrices are `w8a16`'s. CPU targets only.
    W8A16E,
    /// Every matrix as two i8 terms with one f32 scale per row (each
    /// row's codes, then the codes of its rounding error), and every
    /// product takes its activations as two i8 terms too, in one
    /// i8 × i8 → i32 product ([`crate::graph::Graph::linear_w16a16`]):
    /// about 15 bits on both sides, twice `w8a16`'s bytes per weight.
    /// Meant per tensor (`--weights-for`) where a model's ids are
    /// sensitive to the weights' rounding; CPU targets only.
    W16A16,
    /// A GGUF checkpoint's 4-bit matrices (Q4_0, Q4_1, Q4_K) with their
    /// own codes kept as i4, two per byte, and an f16 scale (and minimum)
    /// per 32-element block; every product with one is taken block by
    /// block in i8 × i4 → i32 against the activations' two i8 terms
    /// ([`crate::graph::Graph::linear_w4a16`]): arm64's s8 × s4
    /// micro-kernel, and about half of `w8a16`'s weight bytes. The other
    /// matrices (5-, 6- and 8-bit types) are `w8a16`'s. CPU targets only
    /// (`spec/quantized-weights.md`).
    W4A16,
}

impl Weights {
    /// Whether the form stores i8 or i4 matrices, which only CPU targets
    /// run (`w8a8`, `w8a16`, `w8a16e`, `w16a16`, `w4a16`).
    pub fn cpu_only(self) -> bool {
        matches!(
            self,
            Weights::W8A8 | Weights::W8A16 | Weights::W8A16E | Weights::W16A16 | Weights::W4A16
        )
    }

    /// The fastest CPU form whose ids stay near llama.cpp's accuracy on the
    /// measured models (`kiln export --weights fast`): `w8a16` (SmolLM2:
    /// 95 % of the non-tie positions equal transformers', as llama.cpp's
    /// own rounding; `w8a8` keeps 80–90 %), with the exceptions of
    /// [`Weights::fast_exceptions`]. spec/quantized-weights.md has the
    /// measurements.
    pub const FAST: Weights = Weights::W8A16;

    /// The form `--weights fast` chooses for a module compiled for
    /// `target` from a checkpoint whose matrices include GGUF 4-bit ones
    /// (`four_bit`, [`crate::models::Checkpoint::has_four_bit_matrices`]):
    /// on arm64, [`Weights::W4A16`] (the GGUF's codes kept, IREE's s8 × s4
    /// micro-kernel, about half the weight bytes; SmolLM2 Q4_1: 745 of 767
    /// text positions equal transformers', 733 with `w8a16`); everywhere
    /// else, and for a checkpoint without 4-bit matrices, [`Weights::FAST`]
    /// (x86 has no 4-bit kernel in IREE 3.13: w4a16 decodes at about twice
    /// w8a16's time there; armv7 has no s8 × s4 kernel).
    /// [`Weights::fast_exceptions`] apply to both.
    pub fn fast_for(target: &crate::iree::Target, four_bit: bool) -> Weights {
        match target {
            crate::iree::Target::Arm64 if four_bit => Weights::W4A16,
            _ => Weights::FAST,
        }
    }

    /// The per-tensor exceptions `--weights fast` adds to [`Weights::FAST`]
    /// for a model of `family`, as `--weights-for` pairs. Gemma 3: its
    /// embedding table as `w8a16e` (the gathered rows to about 15 bits)
    /// and its MLP down projections as `w16a16`; measured through kiln on
    /// 768 text positions, 696 (90.6 %) equal transformers' with `w8a16`
    /// alone, 735 (95.7 %) with both, against llama.cpp's rounding's
    /// simulated 725. None for the others (SmolLM2: 733 of 767, 95.6 %,
    /// with `w8a16` alone). spec/quantized-weights.md has the table.
    pub fn fast_exceptions(family: crate::models::Family) -> Vec<(String, Weights)> {
        match family {
            crate::models::Family::Gemma3 => vec![
                ("embed_tokens".into(), Weights::W8A16E),
                ("mlp.down_proj".into(), Weights::W16A16),
            ],
            _ => Vec::new(),
        }
    }
}

impl From<DType> for Weights {
    fn from(d: DType) -> Weights {
        Weights::Dtype(d)
    }
}

impl std::fmt::Display for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Weights::Dtype(d) => write!(f, "{d}"),
            Weights::Keep => f.write_str("keep"),
            Weights::W8A8 => f.write_str("w8a8"),
            Weights::W8A16 => f.write_str("w8a16"),
            Weights::W8A16E => f.write_str("w8a16e"),
            Weights::W16A16 => f.write_str("w16a16"),
            Weights::W4A16 => f.write_str("w4a16"),
            Weights::Quantize(t) => write!(f, "{}", t.to_string().to_lowercase()),
        }
    }
}

impl std::str::FromStr for Weights {
    type Err = String;

    /// The names [`Weights`]' `Display` writes: `bf16`, `f16`, `f32`,
    /// `keep`, `q8_0`, `q4_0`, `w8a8`, `w8a16`, `w8a16e`, `w16a16`, `w4a16`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bf16" => Ok(DType::BF16.into()),
            "f16" => Ok(DType::F16.into()),
            "f32" => Ok(DType::F32.into()),
            "keep" => Ok(Weights::Keep),
            "q8_0" => Ok(Weights::Quantize(GgmlType::Q8_0)),
            "q4_0" => Ok(Weights::Quantize(GgmlType::Q4_0)),
            "w8a8" => Ok(Weights::W8A8),
            "w8a16" => Ok(Weights::W8A16),
            "w8a16e" => Ok(Weights::W8A16E),
            "w16a16" => Ok(Weights::W16A16),
            "w4a16" => Ok(Weights::W4A16),
            _ => Err(format!(
                "unknown weights form {s:?} (bf16, f16, f32, keep, q8_0, q4_0, w8a8, w8a16, w8a16e, w16a16 or w4a16)"
            )),
        }
    }
}

/// Shapes of the KV-cache export (`kiln export --kv-cache`): `default()`
/// (P = SEQ, N = 2·P, f32 caches, no top-K) and the setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KvCacheOptions {
    /// Prompt bucket P (default: SEQ).
    pub prompt_len: Option<usize>,
    /// Max context N (default: 2·P, capped at the model's max positions).
    pub max_context: Option<usize>,
    /// Cache dtype: f32 or bf16.
    pub cache_dtype: DType,
    /// `Some(K)`: prefill and decode also return the K largest logits and
    /// their ids (`kiln export --sampling topk=K`).
    pub top_k: Option<usize>,
    /// Attention spans below N (`kiln export --kv-spans`): each adds a
    /// prefill and a decode over the same caches that attend to the
    /// first B positions only (`spec/kv-cache.md`). `None`:
    /// [`KvCacheOptions::default_spans`]; `Some(vec![])`: none.
    pub spans: Option<Vec<usize>>,
}

impl Default for KvCacheOptions {
    /// P = SEQ, N = 2·P (capped), f32 caches, no top-K outputs.
    fn default() -> Self {
        KvCacheOptions {
            prompt_len: None,
            max_context: None,
            cache_dtype: DType::F32,
            top_k: None,
            spans: None,
        }
    }
}

impl KvCacheOptions {
    /// Sets the prompt bucket P (`None`: SEQ).
    pub fn prompt_len(mut self, prompt_len: impl Into<Option<usize>>) -> Self {
        self.prompt_len = prompt_len.into();
        self
    }

    /// Sets the max context N (`None`: 2·P, capped).
    pub fn max_context(mut self, max_context: impl Into<Option<usize>>) -> Self {
        self.max_context = max_context.into();
        self
    }

    /// Sets the cache dtype (f32 or bf16).
    pub fn cache_dtype(mut self, cache_dtype: DType) -> Self {
        self.cache_dtype = cache_dtype;
        self
    }

    /// Sets K of the top-K outputs (`None`: no top-K outputs).
    pub fn top_k(mut self, top_k: impl Into<Option<usize>>) -> Self {
        self.top_k = top_k.into();
        self
    }

    /// Sets the attention spans below N (`None`: the default ones,
    /// [`KvCacheOptions::default_spans`]; an empty list: none).
    pub fn spans(mut self, spans: impl Into<Option<Vec<usize>>>) -> Self {
        self.spans = spans.into();
        self
    }

    /// The attention spans when none are given, for prompt bucket `p` and
    /// max context `n`: the powers of two from 256 below N that are at
    /// least P (none when N ≤ 256). A call then attends to at most twice
    /// the positions it needs, for one more pair of functions per
    /// doubling of N: N 4096 gets 256, 512, 1024 and 2048.
    pub fn default_spans(p: usize, n: usize) -> Vec<usize> {
        std::iter::successors(Some(256usize), |b| b.checked_mul(2))
            .take_while(|&b| b < n)
            .filter(|&b| b >= p)
            .collect()
    }
}
