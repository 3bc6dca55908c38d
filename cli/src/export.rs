//! `kiln export CHECKPOINT --seq N …`: checkpoint → MLIR + safetensors + irpa + manifest.

use crate::error::{Error, Result};
use kiln::export::{export, ExportOptions, ExportReport, KvCacheOptions};
use kiln::graph::DType;
use kiln::manifest::KvPair;
use kiln::models::Checkpoint;
use kiln::params::GgmlType;
use kiln::stablehlo::ConstantPolicy;
use std::path::{Path, PathBuf};

/// Arguments of `kiln export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// HF folder (config.json + safetensors) or GGUF file.
    pub checkpoint: PathBuf,
    /// Fixed sequence length of the exported function.
    #[arg(long)]
    pub seq: usize,
    /// Output directory.
    #[arg(long, short = 'o', value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    /// Base name of the output files (default: the checkpoint's folder or file name).
    #[arg(long)]
    pub name: Option<String>,
    /// Exported function name (default: the name).
    #[arg(long)]
    pub function: Option<String>,
    /// How the weights are stored: bf16, f16 or f32 (every weight in that
    /// dtype); keep (a GGUF's own types: quantized matrices stay quantized
    /// and are widened in the graph); q8_0 or q4_0 (every matrix quantized
    /// with llama.cpp's reference rounding, vectors bf16); w8a8 (i8
    /// matrices times activations rounded to i8: lossy, fastest on CPUs,
    /// not for Vulkan); w8a16 (the same i8 matrices times activations as
    /// two i8 terms: only the weights are rounded, not for Vulkan); w8a16e
    /// (w8a16, the embedding's gathered rows in two i8 terms); w16a16 (two
    /// i8 terms on both sides, twice the bytes); w4a16 (a GGUF's 4-bit
    /// matrices keep their codes as i4 with their own block scales, the others
    /// w8a16's: arm64's s8 × s4 kernel); fast (the fastest CPU form near
    /// llama.cpp's accuracy for --fast-for's target: w8a16, w4a16 on arm64
    /// for a GGUF with 4-bit matrices, with per-model exceptions; the
    /// export says which).
    #[arg(long, value_enum, default_value_t = WeightsArg::Bf16)]
    pub weights: WeightsArg,
    /// The CPU target `--weights fast` chooses for: host (the default),
    /// arm64 or arm32. For arm64, a GGUF's 4-bit matrices keep their codes
    /// (w4a16: IREE's s8 × s4 kernel, about half the weight bytes);
    /// elsewhere fast is w8a16 (x86 and armv7 have no 4-bit kernel in IREE
    /// 3.13).
    #[arg(long, value_name = "TARGET")]
    pub fast_for: Option<String>,
    /// An exception to --weights for every tensor whose HF name contains
    /// PATTERN (repeatable; the last match wins), e.g.
    /// `--weights-for embed_tokens=bf16` or `--weights-for lm_head=q8_0`.
    #[arg(long, value_name = "PATTERN=FORM")]
    pub weights_for: Vec<String>,
    /// Parameter scope the runtime opens the archive under.
    #[arg(long, default_value = "model")]
    pub scope: String,
    /// Constant policy: external, inline or threshold=BYTES.
    #[arg(long, default_value = "external")]
    pub constants: String,
    /// Also write NAME-kv-gen.mlir: a prefill and a one-token decode
    /// function carrying K/V caches, over the same parameters.
    #[arg(long)]
    pub kv_cache: bool,
    /// KV export: prompt bucket P, prefill's token count (default: --seq).
    #[arg(long, value_name = "P", requires = "kv_cache")]
    pub prompt_len: Option<usize>,
    /// KV export: max context N, prompt plus new tokens (default: 2·P).
    #[arg(long, value_name = "N", requires = "kv_cache")]
    pub max_context: Option<usize>,
    /// KV export: cache dtype.
    #[arg(
        long,
        value_enum,
        value_name = "DTYPE",
        default_value = "f32",
        requires = "kv_cache"
    )]
    pub kv_dtype: KvDtypeArg,
    /// KV export: `greedy` (the argmax only), or `topk=K` (`topk`: K = 40)
    /// to make prefill and decode also return the K largest logits and
    /// their ids, for `kiln generate --temperature/--top-k/--top-p…`.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "greedy",
        requires = "kv_cache"
    )]
    pub sampling: String,
    /// KV export: attention spans below N, comma-separated (e.g.
    /// 256,1024), or `none`: each span B adds a prefill and a decode over
    /// the same caches that attend to the first B positions only, so a
    /// call at position p costs about what a pair with N = B would (the
    /// smallest span holding the call runs). Default: the powers of two
    /// from 256 below N (none when N ≤ 256).
    #[arg(long, value_name = "LIST", requires = "kv_cache")]
    pub kv_spans: Option<String>,
    /// The largest tensor, in bytes, a function may bind: a larger
    /// embedding, LM head (or its logits) or weight matrix, or a table over
    /// 65535 rows, is used in row chunks over the same archive entry, and
    /// larger KV caches are split into groups of layers. The default,
    /// 134217728 (2^27), is the storage-buffer range every Vulkan device
    /// guarantees; 0 turns this off (CPU targets only), the default of the
    /// CPU-only forms (w8a8, w8a16, w8a16e, w16a16, w4a16, fast), whose whole tensors `kiln compile
    /// --pack` can pack.
    #[arg(long, value_name = "BYTES")]
    pub max_tensor_bytes: Option<u64>,
    /// Print a JSON report on stdout instead of text (and no status lines).
    #[arg(long)]
    pub json: bool,
}

/// Parses one `--weights-for PATTERN=FORM`.
pub fn parse_weights_for(s: &str) -> Result<(String, kiln::export::Weights)> {
    use clap::ValueEnum;
    let bad = |why: &str| Error::Usage(format!("--weights-for {s}: {why}"));
    let (pattern, form) = s
        .rsplit_once('=')
        .ok_or_else(|| bad("expected PATTERN=FORM"))?;
    if pattern.is_empty() {
        return Err(bad("the pattern is empty"));
    }
    let w = WeightsArg::from_str(form, false).map_err(|_| {
        bad("FORM must be bf16, f16, f32, keep, q8_0, q4_0, w8a8, w8a16, w8a16e, w16a16, w4a16 or fast")
    })?;
    Ok((pattern.to_string(), w.into()))
}

/// `--kv-dtype`: the element type of the KV caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KvDtypeArg {
    /// f32 caches (exact against the redecode forward).
    F32,
    /// bf16 caches (half the cache memory; on Vulkan as i32 words of two).
    Bf16,
}

/// `--weights`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsArg {
    /// Every weight as bf16.
    Bf16,
    /// Every weight as f16.
    F16,
    /// Every weight as f32.
    F32,
    /// A GGUF's own types; quantized matrices kept in kiln's block form.
    Keep,
    /// Every matrix quantized to Q8_0 (llama.cpp's reference rounding).
    #[value(name = "q8_0")]
    Q8_0,
    /// Every matrix quantized to Q4_0 (llama.cpp's reference rounding).
    #[value(name = "q4_0")]
    Q4_0,
    /// Every matrix as i8 with a scale per row, multiplied by activations
    /// rounded to i8 (lossy; the fastest on CPUs; CPU targets only).
    W8a8,
    /// The w8a8 matrices, multiplied by activations as two i8 terms (only
    /// the weights are rounded; CPU targets only).
    W8a16,
    /// w8a16, with the embedding table's rows in two i8 terms for its
    /// gathers (the rest as a second part; CPU targets only).
    W8a16e,
    /// The w8a16 products with the weights in two i8 terms too (about 15
    /// bits on both sides, twice w8a16's weight bytes; CPU targets only).
    W16a16,
    /// A GGUF's 4-bit matrices with their own codes kept as i4 and f16
    /// block scales, multiplied block by block (arm64's s8 × s4 kernel);
    /// the other matrices as w8a16 (CPU targets only).
    W4a16,
    /// The fastest CPU form near llama.cpp's accuracy (w8a16 today, with
    /// per-model exceptions; CPU targets only).
    Fast,
}

impl From<WeightsArg> for kiln::export::Weights {
    fn from(w: WeightsArg) -> Self {
        match w {
            WeightsArg::Bf16 => DType::BF16.into(),
            WeightsArg::F16 => DType::F16.into(),
            WeightsArg::F32 => DType::F32.into(),
            WeightsArg::Keep => kiln::export::Weights::Keep,
            WeightsArg::Q8_0 => kiln::export::Weights::Quantize(GgmlType::Q8_0),
            WeightsArg::Q4_0 => kiln::export::Weights::Quantize(GgmlType::Q4_0),
            WeightsArg::W8a8 => kiln::export::Weights::W8A8,
            WeightsArg::W8a16 => kiln::export::Weights::W8A16,
            WeightsArg::W16a16 => kiln::export::Weights::W16A16,
            WeightsArg::W4a16 => kiln::export::Weights::W4A16,
            WeightsArg::W8a16e => kiln::export::Weights::W8A16E,
            WeightsArg::Fast => kiln::export::Weights::FAST,
        }
    }
}

/// Parses `--constants` with the scope.
pub fn parse_constants(s: &str, scope: &str) -> Result<ConstantPolicy> {
    if scope.is_empty() {
        return Err(Error::Usage("--scope must not be empty".into()));
    }
    match s {
        "external" => Ok(ConstantPolicy::ExternalAlways {
            scope: scope.into(),
        }),
        "inline" => Ok(ConstantPolicy::InlineAlways),
        _ => match s.strip_prefix("threshold=").map(str::parse::<u64>) {
            Some(Ok(bytes)) => Ok(ConstantPolicy::SizeThreshold {
                bytes,
                scope: scope.into(),
            }),
            _ => Err(Error::Usage(format!(
                "--constants {s}: expected external, inline or threshold=BYTES"
            ))),
        },
    }
}

/// `bytes` in B, KiB or MiB (one decimal).
fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// The default K of `--sampling topk`: llama.cpp's default `--top-k`.
pub const DEFAULT_TOP_K: usize = 40;

/// Parses `--sampling`: `greedy` → None, `topk` → Some(40), `topk=K` → Some(K).
fn parse_sampling(s: &str) -> Result<Option<usize>> {
    let bad = || {
        Error::Usage(format!(
            "--sampling {s}: expected greedy, topk or topk=K with K ≥ 1 (e.g. topk=40)"
        ))
    };
    match s {
        "greedy" => Ok(None),
        "topk" => Ok(Some(DEFAULT_TOP_K)),
        _ => {
            let k: usize = s
                .strip_prefix("topk=")
                .and_then(|k| k.parse().ok())
                .ok_or_else(bad)?;
            if k == 0 {
                return Err(bad());
            }
            Ok(Some(k))
        }
    }
}

/// Runs `kiln export`.
pub fn run(a: Args) -> Result<i32> {
    if a.json {
        super::set_quiet();
    }
    let fast_for = match (&a.fast_for, a.weights) {
        (None, _) => kiln::iree::Target::Host,
        (Some(t), WeightsArg::Fast) => match kiln::iree::Target::parse(t)? {
            t @ (kiln::iree::Target::Host
            | kiln::iree::Target::Arm64
            | kiln::iree::Target::Arm32) => t,
            _ => {
                return Err(Error::Usage(format!(
                    "--fast-for {t}: fast is a CPU form (host, arm64 or arm32)"
                )))
            }
        },
        (Some(_), w) => {
            return Err(Error::Usage(format!(
                "--fast-for chooses for --weights fast, not --weights {}",
                kiln::export::Weights::from(w)
            )))
        }
    };
    let mut weights: kiln::export::Weights = a.weights.into();
    let constants = parse_constants(&a.constants, &a.scope)?;
    let kv = kv_options(&a)?;
    let mut weights_for = a
        .weights_for
        .iter()
        .map(|s| parse_weights_for(s))
        .collect::<Result<Vec<_>>>()?;
    let t = std::time::Instant::now();
    let ckpt = Checkpoint::open(&a.checkpoint)?;
    if a.weights == WeightsArg::Fast {
        weights = kiln::export::Weights::fast_for(&fast_for, ckpt.has_four_bit_matrices());
    }
    // `fast`'s own exceptions come first, so the user's flags win.
    let fast_exceptions = match a.weights {
        WeightsArg::Fast => kiln::export::Weights::fast_exceptions(ckpt.config.family),
        _ => Vec::new(),
    };
    weights_for.splice(0..0, fast_exceptions.iter().cloned());
    let mut opts = ExportOptions::new(a.seq, a.out.clone())
        .weights(weights)
        .weights_for(weights_for)
        .constants(constants)
        .progress(super::progress::bars())
        .kv(kv)
        .max_tensor_bytes(a.max_tensor_bytes.unwrap_or(match weights.cpu_only() {
            true => 0,
            false => kiln::DecoderConfig::MAX_TENSOR_BYTES,
        }));
    opts.name = a.name;
    opts.function = a.function;
    let r = export(&ckpt, &opts)?;
    if a.json {
        super::print_json(&r);
    }
    print_summary(&a.checkpoint, &a.out, &r, t);
    if a.weights == WeightsArg::Fast {
        let flags: Vec<String> = fast_exceptions
            .iter()
            .map(|(p, w)| format!("--weights-for {p}={w}"))
            .collect();
        let with = match flags.is_empty() {
            true => String::new(),
            false => format!(", with {}", flags.join(" ")),
        };
        let why = match weights {
            kiln::export::Weights::W4A16 => format!(
                "the GGUF's 4-bit matrices keep their codes as i4 with their own block scales, the others \
                 are i8 with one scale per row, times the activations as two i8 terms \
                 (half a byte per 4-bit weight, for {fast_for}'s s8 x s4 kernel"
            ),
            _ => format!(
                "i8 weights, one scale per row, times the activations as two i8 terms (the fastest \
                 form near llama.cpp's accuracy on {fast_for}: {}",
                match fast_for {
                    kiln::iree::Target::Arm64 => "this checkpoint has no GGUF 4-bit matrices",
                    _ => "IREE 3.13 has no 4-bit kernel there; --fast-for arm64 keeps a GGUF's \
                          4-bit codes",
                }
            ),
        };
        crate::status!(
            "  fast      --weights fast chose {weights} for {fast_for}{with}: {why}; \
             spec/quantized-weights.md)"
        );
    }
    print_vulkan_notes(&r.vulkan_issues);
    Ok(0)
}

/// The KV-cache options of `--kv-cache`, `--prompt-len`, `--max-context`,
/// `--kv-dtype` and `--sampling`; None without `--kv-cache`.
fn kv_options(a: &Args) -> Result<Option<KvCacheOptions>> {
    if !a.kv_cache {
        return Ok(None);
    }
    let cache_dtype = match a.kv_dtype {
        KvDtypeArg::F32 => DType::F32,
        KvDtypeArg::Bf16 => DType::BF16,
    };
    Ok(Some(
        KvCacheOptions::default()
            .prompt_len(a.prompt_len)
            .max_context(a.max_context)
            .cache_dtype(cache_dtype)
            .top_k(parse_sampling(&a.sampling)?)
            .spans(a.kv_spans.as_deref().map(parse_spans).transpose()?),
    ))
}

/// Parses `--kv-spans`: `none`, or positions separated by commas.
fn parse_spans(s: &str) -> Result<Vec<usize>> {
    if s.trim() == "none" {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|b| b.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| {
            Error::Usage(format!(
                "--kv-spans {s}: expected none or positions separated by commas (e.g. 256,1024)"
            ))
        })
}

/// The status lines after an export of `checkpoint` into `out`: the
/// model, the function, the weights, the KV pair, the files written and
/// the time since `start`.
fn print_summary(checkpoint: &Path, out: &Path, r: &ExportReport, start: std::time::Instant) {
    let m = &r.manifest;
    let c = &m.config;
    crate::status!(
        "kiln export: {} ({}) → {}",
        checkpoint.display(),
        m.architecture,
        out.display()
    );
    crate::status!(
        "  model     {} layers, hidden {}, heads {}/{} (head dim {}), ffn {}, vocab {}{}",
        c.num_layers,
        c.hidden_size,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        c.intermediate_size,
        c.vocab_size,
        if c.tie_word_embeddings {
            ", tied head"
        } else {
            ""
        }
    );
    crate::status!(
        "  function  @{}(tensor<1x{}xi32>) -> tensor<{}xi32>, scope \"{}\", constants {}",
        m.function,
        m.seq,
        m.seq,
        m.scope,
        m.constants
    );
    crate::status!(
        "  weights   {} tensors, {} parameters, {} as {}",
        m.parameter_tensors,
        m.parameter_count,
        human(m.parameter_bytes),
        m.weights_dtype
    );
    if let Some(kv) = m.kv.as_ref().map(|k| &k.pair) {
        print_kv_summary(kv);
    }
    let mut written = vec![&r.mlir, &r.safetensors, &r.irpa, &r.manifest_path];
    if let Some(p) = &r.kv_mlir {
        written.insert(1, p);
    }
    for p in written {
        let size = std::fs::metadata(p).map(|md| md.len()).unwrap_or(0);
        crate::status!("  wrote     {} ({})", p.display(), human(size));
    }
    crate::status!(
        "  time      graph {:.2}s, weights {:.2}s, total {:.2}s",
        r.graph_seconds,
        r.weights_seconds,
        start.elapsed().as_secs_f64()
    );
}

/// The `kv-cache` status line: the prefill and decode signatures, the
/// caches and any top-K outputs.
fn print_kv_summary(kv: &KvPair) {
    let shape = kv
        .cache_shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x");
    let caches = match kv.cache_count {
        1 => format!("K, V: tensor<{shape}x{}>", kv.cache_dtype),
        n => format!(
            "K, V: {n} tensors each of tensor<{shape}x{}>",
            kv.cache_dtype
        ),
    };
    let top = kv.top_k.map_or(String::new(), |k| {
        format!("; also the top {k} logits and ids")
    });
    crate::status!(
        "  kv-cache  @{}(tokens tensor<1x{}xi32>, start, length, K, V) and @{}(token tensor<1xi32>, position, K, V); {caches}{top}",
        kv.prefill, kv.prompt_len, kv.decode
    );
    if !kv.spans.is_empty() {
        let spans: Vec<String> = kv.spans.iter().map(|s| s.span.to_string()).collect();
        crate::status!(
            "  spans     {} of N = {}: @{}_B and @{}_B attend to the first B positions",
            spans.join(", "),
            kv.max_context,
            kv.prefill,
            kv.decode
        );
    }
}

/// One note per reason the export is not for Vulkan (these print even
/// under `--quiet`).
fn print_vulkan_notes(issues: &[String]) {
    for issue in issues {
        // An i8 weight is a form choice (spec/quantized-weights.md), the
        // rest are device limits.
        let spec = match issue.contains("an i8 weight") {
            true => "spec/quantized-weights.md",
            false => "spec/vulkan-limits.md",
        };
        eprintln!("  note      not for Vulkan (CPU targets are fine): {issue}; see {spec}");
    }
}
