//! Opening a checkpoint — an HF folder (config.json + safetensors, single
//! or sharded), a GGUF file, or a synthetic in-process model — as one
//! [`Checkpoint`]: a [`DecoderConfig`] plus tensors under their HF names.

use super::config::{DecoderConfig, Family, RopeScaling};
use super::decoder::expected_tensors;
use super::family::{Undo, ROPE_FREQS};
use super::ModelError;
use crate::params::gguf::{GgmlType, GgufFile, GgufValue};
use crate::params::safetensors;
use crate::params::ParamsError;
use crate::util::IoError;

/// `Result` of opening and reading a checkpoint.
type Result<T, E = ModelError> = std::result::Result<T, E>;
use std::path::{Path, PathBuf};

/// Where a checkpoint's tensors come from.
enum Source {
    /// HF safetensors (names are already HF names).
    Hf(safetensors::Checkpoint),
    /// GGUF, with (HF name, GGUF name, row permutation to undo) per tensor.
    Gguf {
        file: Box<GgufFile>,
        map: Vec<(String, String, Undo)>,
    },
    /// Deterministic pseudo-random weights (the demo model).
    Synthetic { seed: u64 },
}

/// A checkpoint opened for export: hyperparameters and named tensors.
pub struct Checkpoint {
    /// Default export name (folder or file stem).
    pub name: String,
    /// Where it was opened from.
    pub path: PathBuf,
    /// Hyperparameters.
    pub config: DecoderConfig,
    source: Source,
    /// (HF name, shape) of every tensor the graph needs, in graph order.
    tensors: Vec<(String, Vec<usize>)>,
}

/// A missing tensor of the checkpoint at `path`.
fn missing_tensor(path: &Path, name: &str) -> ModelError {
    let e = ModelError::MissingTensor {
        name: name.to_string(),
        expected: None,
    };
    e.in_file(path)
}

/// Names a checkpoint may carry that the graph does not use and that are
/// safe to ignore (derived buffers some exporters save).
fn ignorable(name: &str) -> bool {
    name.ends_with("rotary_emb.inv_freq")
}

fn stem_name(path: &Path) -> String {
    let base = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    base.map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

impl Checkpoint {
    /// Opens an HF folder (or its config.json), or a GGUF file (detected by
    /// its magic bytes, not its extension).
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        if !path.exists() {
            let e = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory");
            return Err(IoError::new(path, e).into());
        }
        if path.is_dir() {
            return Self::open_hf(path);
        }
        if path.file_name().is_some_and(|n| n == "config.json") {
            return Self::open_hf(path.parent().unwrap_or(Path::new(".")));
        }
        let mut magic = [0u8; 4];
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| IoError::new(path, e))?;
        let n = f.read(&mut magic).map_err(|e| IoError::new(path, e))?;
        if n == 4 && &magic == b"GGUF" {
            return Self::open_gguf(path);
        }
        Err(ModelError::NotCheckpoint { folder: false }.in_file(path))
    }

    /// Opens an HF folder: `config.json` plus `model.safetensors` or shards.
    pub fn open_hf(dir: &Path) -> Result<Checkpoint> {
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            return Err(ModelError::NotCheckpoint { folder: true }.in_file(dir));
        }
        let config = DecoderConfig::from_hf_json_file(&cfg_path)?;
        let st = safetensors::open_checkpoint(dir)?;
        let mut available: Vec<(String, Vec<usize>)> = st
            .tensors()
            .map(|t| {
                (
                    t.name.to_string(),
                    t.shape.iter().map(|&d| d as usize).collect(),
                )
            })
            .collect();
        if config.tie_word_embeddings {
            // A tied checkpoint may still carry a copy of the head; the
            // graph reuses the embedding, as transformers does.
            available.retain(|(n, _)| n != "lm_head.weight");
        }
        let tensors = check_tensors(dir, &config, &available)?;
        Ok(Checkpoint {
            name: stem_name(dir),
            path: dir.to_path_buf(),
            config,
            source: Source::Hf(st),
            tensors,
        })
    }

    /// Opens a GGUF file of architecture `llama`, `mistral`, `qwen2`,
    /// `phi3`, `gemma` or `gemma2` (llama.cpp's layouts, `spec/gguf.md`).
    pub fn open_gguf(path: &Path) -> Result<Checkpoint> {
        let file = GgufFile::open(path)?;
        let config = gguf_config(path, &file)?;
        let mut map = Vec::new();
        let mut available = Vec::new();
        for t in file.tensors() {
            if super::family::config_tensor(&t.name, &config) {
                continue;
            }
            let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
            let Some((hf, heads)) = gguf_to_hf(&t.name, &config) else {
                let e = ModelError::UnexpectedTensor {
                    name: t.name.clone(),
                    family: config.family,
                };
                return Err(e.in_file(path));
            };
            available.push((hf.clone(), shape));
            map.push((hf, t.name.clone(), heads));
        }
        let tensors = check_tensors(path, &config, &available)?;
        Ok(Checkpoint {
            name: stem_name(path),
            path: path.to_path_buf(),
            config,
            source: Source::Gguf {
                file: Box::new(file),
                map,
            },
            tensors,
        })
    }

    /// A deterministic pseudo-random model with `config` (the demo model):
    /// matrices uniform in ±0.4·√3/… scaled like an initializer range of
    /// 0.4, norm weights 1 + 0.2·u.
    pub fn synthetic(name: &str, config: DecoderConfig, seed: u64) -> Result<Checkpoint> {
        config.validate()?;
        let tensors = expected_tensors(&config).map_err(|e| e.in_file(name))?;
        Ok(Checkpoint {
            name: name.to_string(),
            path: PathBuf::from(format!("<synthetic {name}>")),
            config,
            source: Source::Synthetic { seed },
            tensors,
        })
    }

    /// (HF name, shape) of every tensor the graph uses, in graph order.
    pub fn tensors(&self) -> &[(String, Vec<usize>)] {
        &self.tensors
    }

    /// Whether `--weights w4a16` would keep any of this checkpoint's
    /// matrices as 4-bit codes: a GGUF with Q4_0, Q4_1 or Q4_K matrices
    /// besides its embedding and head.
    pub fn has_four_bit_matrices(&self) -> bool {
        self.tensors()
            .iter()
            .any(|(n, s)| self.four_bit_form(n, s).is_some())
    }

    /// The 4-bit form `--weights w4a16` keeps tensor `name` (HF name) of
    /// `shape` in: a GGUF matrix in a 4-bit type, in whole blocks (the
    /// embedding too: a gather widens only its rows).
    pub(crate) fn four_bit_form(&self, name: &str, shape: &[usize]) -> Option<super::Int4Form> {
        use super::Int4Form;
        let keeps = shape.len() == 2 && shape[1] % Int4Form::GROUP == 0;
        Int4Form::of(self.ggml_type(name)?).filter(|_| keeps)
    }

    /// The GGML type `name` (HF name) is stored in, for a GGUF checkpoint.
    pub fn ggml_type(&self, name: &str) -> Option<GgmlType> {
        let Source::Gguf { file, map } = &self.source else {
            return None;
        };
        let (_, gname, _) = map.iter().find(|(hf, _, _)| hf == name)?;
        Some(file.tensor(gname)?.ggml_type)
    }

    /// The stored bytes of matrix `name` (HF name) of a GGUF checkpoint,
    /// with the row order that gives HF layout. `None` for another source,
    /// a tensor that is not a matrix, or one whose values the loader
    /// changes (Gemma's norms).
    pub(crate) fn ggml_rows(&self, name: &str) -> Option<GgmlRows<'_>> {
        let Source::Gguf { file, map } = &self.source else {
            return None;
        };
        let (_, gname, undo) = map.iter().find(|(hf, _, _)| hf == name)?;
        let info = file.tensor(gname)?;
        let &[rows, cols] = &info.shape()[..] else {
            return None;
        };
        let (rows, cols) = (rows as usize, cols as usize);
        let order = match undo {
            Undo::None => None,
            Undo::RopeHeads(n) => Some(unpermuted_order(rows, *n)),
            Undo::PlusOne => return None,
        };
        Some(GgmlRows {
            ty: info.ggml_type,
            bytes: file.tensor_data(info),
            shape: [rows, cols],
            order,
        })
    }

    /// The f32 values of `name` (HF name, HF layout): upcast from f16/bf16,
    /// dequantized and un-permuted for GGUF, generated for synthetic models.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        match &self.source {
            Source::Hf(st) => {
                let t = st
                    .get(name)
                    .ok_or_else(|| missing_tensor(&self.path, name))?;
                if !t.dtype.is_float() {
                    return Err(ParamsError::Unsupported {
                        file: self.path.clone(),
                        tensor: name.to_string(),
                        msg: format!("non-float dtype {:?}", t.dtype),
                    }
                    .into());
                }
                Ok(t.to_f32())
            }
            Source::Gguf { file, map } => {
                let (info, heads) = self.gguf_tensor(file, map, name)?;
                let v = file.dequantize(info)?;
                Ok(match heads {
                    Undo::RopeHeads(n) => {
                        let s = info.shape();
                        unpermute_rows(&v, s[0] as usize, s[1] as usize, *n)
                    }
                    // (1 + w) − 1 is exact in f32 for stored values in [0.5, 2].
                    Undo::PlusOne => v.into_iter().map(|x| x - 1.0).collect(),
                    Undo::None => v,
                })
            }
            Source::Synthetic { seed } => Ok(synthetic_values(*seed, name, &self.shape(name)?)),
        }
    }
}

impl Checkpoint {
    /// The f32 values of rows `rows` of matrix `name` (HF layout; any other
    /// tensor is one row), as [`Checkpoint::read_f32`] gives them: export
    /// converts a tensor in row chunks, so its memory is bounded by a chunk,
    /// not by the tensor. Only the rows' bytes are read and dequantized.
    pub fn read_f32_rows(&self, name: &str, rows: std::ops::Range<usize>) -> Result<Vec<f32>> {
        let shape = self.shape(name)?;
        let (total, cols) = match shape[..] {
            [r, c] => (r, c),
            _ => (1, shape.iter().product()),
        };
        if rows.end > total || rows.start > rows.end {
            let e = ModelError::OutOfRange {
                what: format!("the rows read of tensor \"{name}\""),
                requirement: format!("must lie within its {total} rows"),
                value: format!("{rows:?}"),
            };
            return Err(e.in_file(&self.path));
        }
        match &self.source {
            Source::Hf(st) if shape.len() == 2 => {
                let t = st
                    .get(name)
                    .ok_or_else(|| missing_tensor(&self.path, name))?;
                if !t.dtype.is_float() {
                    return self.read_f32(name);
                }
                let b = cols * t.dtype.size();
                let mut v = Vec::new();
                crate::params::convert::bytes_to_f32(
                    t.dtype,
                    &t.data[rows.start * b..rows.end * b],
                    &mut v,
                );
                Ok(v)
            }
            Source::Gguf { file, map } if shape.len() == 2 => {
                let (info, undo) = self.gguf_tensor(file, map, name)?;
                let gname = &info.name;
                let order = match undo {
                    Undo::None => None,
                    Undo::RopeHeads(n) => Some(unpermuted_order(total, *n)),
                    Undo::PlusOne => {
                        let all = self.read_f32(name)?;
                        return Ok(all[rows.start * cols..rows.end * cols].to_vec());
                    }
                };
                let src = file_rows(
                    file.tensor_data(info),
                    total,
                    order.as_deref(),
                    rows.clone(),
                );
                let mut out = vec![0f32; rows.len() * cols];
                crate::params::quant::dequantize(info.ggml_type, &src, &mut out).map_err(
                    |msg| ParamsError::Unsupported {
                        file: self.path.clone(),
                        tensor: gname.clone(),
                        msg,
                    },
                )?;
                Ok(out)
            }
            _ => {
                let all = self.read_f32(name)?;
                Ok(all[rows.start * cols..rows.end * cols].to_vec())
            }
        }
    }
}

impl Checkpoint {
    /// The shape (HF layout) of tensor `name`, or an error naming the file.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        self.tensors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .ok_or_else(|| missing_tensor(&self.path, name))
    }

    /// The GGUF tensor behind HF tensor `name`, and what to undo on it.
    fn gguf_tensor<'f>(
        &self,
        file: &'f GgufFile,
        map: &'f [(String, String, Undo)],
        name: &str,
    ) -> Result<(&'f crate::params::gguf::GgufTensorInfo, &'f Undo)> {
        let (_, gname, undo) = map
            .iter()
            .find(|(hf, _, _)| hf == name)
            .ok_or_else(|| missing_tensor(&self.path, name))?;
        let info = file
            .tensor(gname)
            .ok_or_else(|| missing_tensor(&self.path, gname))?;
        Ok((info, undo))
    }
}

/// The bytes of output rows `rows` of a `total`-row tensor stored as
/// `bytes` (equal-sized rows), where output row `r` is file row
/// `order[r]` (the identity without `order`).
pub(crate) fn file_rows(
    bytes: &[u8],
    total: usize,
    order: Option<&[usize]>,
    rows: std::ops::Range<usize>,
) -> Vec<u8> {
    let rb = bytes.len() / total.max(1);
    match order {
        None => bytes[rows.start * rb..rows.end * rb].to_vec(),
        Some(o) => rows
            .flat_map(|r| &bytes[o[r] * rb..(o[r] + 1) * rb])
            .copied()
            .collect(),
    }
}

/// One GGUF tensor's stored bytes, for repacking without widening
/// ([`Checkpoint::ggml_rows`]).
pub struct GgmlRows<'a> {
    /// The GGML type of the bytes.
    pub ty: GgmlType,
    /// Every row's blocks, in the file's row order.
    pub bytes: &'a [u8],
    /// `[rows, cols]` in HF layout.
    pub shape: [usize; 2],
    /// The file row of each HF row, where the file permutes rows
    /// (llama.cpp's Q/K layout); `None` for the identity.
    pub order: Option<Vec<usize>>,
}

/// The file row of each output row of [`unpermute_rows`].
fn unpermuted_order(rows: usize, n: usize) -> Vec<usize> {
    let (hd, half) = (rows / n, rows / n / 2);
    let mut order = vec![0; rows];
    for h in 0..n {
        for a in 0..2 {
            for b in 0..half {
                order[h * hd + a * half + b] = h * hd + b * 2 + a;
            }
        }
    }
    order
}

/// Checks the checkpoint holds exactly the tensors the config implies,
/// with the shapes it implies; returns them in graph order.
fn check_tensors(
    path: &Path,
    cfg: &DecoderConfig,
    available: &[(String, Vec<usize>)],
) -> Result<Vec<(String, Vec<usize>)>> {
    // Each layer has tensors of its own: more layers than the checkpoint
    // has tensors cannot be, whatever they are (checked before any work
    // per layer).
    if cfg.num_layers > available.len() {
        let e = ModelError::ConfigValue {
            file: "config",
            key: "num_hidden_layers".into(),
            requirement: format!(
                "must be at most the checkpoint's {} tensors",
                available.len()
            ),
            found: Some(cfg.num_layers.to_string()),
        };
        return Err(e.in_file(path));
    }
    let expected = expected_tensors(cfg).map_err(|e| e.in_file(path))?;
    let by_name: std::collections::HashMap<&str, &Vec<usize>> =
        available.iter().map(|(n, s)| (n.as_str(), s)).collect();
    let wanted: std::collections::HashSet<&str> =
        expected.iter().map(|(n, _)| n.as_str()).collect();
    for (name, shape) in &expected {
        match by_name.get(name.as_str()).map(|s| (name, *s)) {
            None => {
                let e = ModelError::MissingTensor {
                    name: name.clone(),
                    expected: Some(shape.clone()),
                };
                return Err(e.in_file(path));
            }
            Some((_, found)) if found != shape => {
                let e = ModelError::Shape {
                    name: name.clone(),
                    expected: shape.clone(),
                    found: found.clone(),
                };
                return Err(e.in_file(path));
            }
            Some(_) => {}
        }
    }
    for (name, _) in available {
        if !ignorable(name) && !wanted.contains(name.as_str()) {
            let e = ModelError::UnexpectedTensor {
                name: name.clone(),
                family: cfg.family,
            };
            return Err(e.in_file(path));
        }
    }
    Ok(expected)
}

/// Maps a GGUF tensor name to its HF name, with the row permutation to
/// undo; the per-block names are the family's.
fn gguf_to_hf(name: &str, cfg: &DecoderConfig) -> Option<(String, Undo)> {
    match name {
        "token_embd.weight" => return Some(("model.embed_tokens.weight".into(), Undo::None)),
        "output_norm.weight" => {
            let undo = if cfg.arch.norm_plus_one {
                Undo::PlusOne
            } else {
                Undo::None
            };
            return Some(("model.norm.weight".into(), undo));
        }
        "output.weight" => return Some(("lm_head.weight".into(), Undo::None)),
        _ => {}
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let l: usize = layer.parse().ok()?;
    let (hf, perm) = cfg.family.gguf_block_tensor(part, cfg)?;
    Some((format!("model.layers.{l}.{hf}"), perm))
}

/// Undoes llama.cpp's Q/K row permutation: view `[rows, cols]` as
/// `[n, rows/n/2, 2, cols]`, swap axes 1 and 2, view back.
pub fn unpermute_rows(v: &[f32], rows: usize, cols: usize, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(v.len());
    for src in unpermuted_order(rows, n) {
        out.extend_from_slice(&v[src * cols..(src + 1) * cols]);
    }
    out
}

fn meta_u(file: &GgufFile, path: &Path, key: &str) -> Result<usize> {
    file.get_metadata(key)
        .and_then(GgufValue::as_u64)
        .map(|x| x as usize)
        .ok_or_else(|| {
            let e = ModelError::MissingKey {
                file: "GGUF metadata",
                key: key.to_string(),
            };
            e.in_file(path)
        })
}

fn meta_f(file: &GgufFile, key: &str) -> Option<f64> {
    file.get_metadata(key).and_then(GgufValue::as_f64)
}

/// Hyperparameters from GGUF metadata (the tokenizer is read separately,
/// by [`crate::tokenizer::from_gguf`]).
fn gguf_config(path: &Path, file: &GgufFile) -> Result<DecoderConfig> {
    let arch = file
        .get_metadata("general.architecture")
        .and_then(GgufValue::as_str)
        .ok_or_else(|| {
            let e = ModelError::MissingKey {
                file: "GGUF metadata",
                key: "general.architecture".into(),
            };
            e.in_file(path)
        })?
        .to_string();
    let family = Family::parse(&arch).map_err(|e| e.in_file(path))?;
    let a = arch.as_str();
    let hidden = meta_u(file, path, &format!("{a}.embedding_length"))?;
    let heads = meta_u(file, path, &format!("{a}.attention.head_count"))?;
    let kv = meta_u(file, path, &format!("{a}.attention.head_count_kv")).unwrap_or(heads);
    let head_dim = meta_u(file, path, &format!("{a}.attention.key_length"))
        .or_else(|_| meta_u(file, path, &format!("{a}.rope.dimension_count")))
        .unwrap_or(hidden.checked_div(heads).unwrap_or(0));
    let n_tokens = file
        .get_metadata("tokenizer.ggml.tokens")
        .and_then(GgufValue::as_array)
        .map_or(0, <[GgufValue]>::len);
    let vocab = meta_u(file, path, &format!("{a}.vocab_size")).unwrap_or(n_tokens);
    let rope_scaling = match file
        .get_metadata(&format!("{a}.rope.scaling.type"))
        .and_then(GgufValue::as_str)
    {
        None | Some("none") => RopeScaling::Default,
        Some("linear") => RopeScaling::Linear {
            factor: meta_f(file, &format!("{a}.rope.scaling.factor")).unwrap_or(1.0),
        },
        Some(other) => {
            let e = ModelError::unsupported(
                format!("GGUF metadata {a}.rope.scaling.type \"{other}\""),
                "none, linear",
            );
            return Err(e.in_file(path));
        }
    };
    // Llama 3.x scaling: llama.cpp's converter writes the per-frequency
    // divisors as a tensor instead of the rule's parameters.
    let rope_scaling = match file.tensor(ROPE_FREQS) {
        None => rope_scaling,
        Some(t) => {
            if rope_scaling != RopeScaling::Default {
                let e = ModelError::unsupported(
                    format!(
                        "tensor {ROPE_FREQS} together with GGUF metadata {a}.rope.scaling.type"
                    ),
                    "either one alone",
                );
                return Err(e.in_file(path));
            }
            let factors = file.dequantize(t)?;
            RopeScaling::Factors {
                factors: factors.into_iter().map(f64::from).collect(),
            }
        }
    };
    let u32_meta = |k: &str| {
        file.get_metadata(k)
            .and_then(GgufValue::as_u64)
            .map(|x| x as u32)
    };
    let config = DecoderConfig {
        family,
        hidden_size: hidden,
        intermediate_size: meta_u(file, path, &format!("{a}.feed_forward_length"))?,
        num_layers: meta_u(file, path, &format!("{a}.block_count"))?,
        num_heads: heads,
        num_kv_heads: kv,
        head_dim,
        vocab_size: vocab,
        rms_norm_eps: meta_f(file, &format!("{a}.attention.layer_norm_rms_epsilon"))
            .unwrap_or(1e-5),
        rope_theta: meta_f(file, &format!("{a}.rope.freq_base")).unwrap_or(10000.0),
        rope_scaling,
        tie_word_embeddings: file.tensor("output.weight").is_none(),
        max_position_embeddings: meta_u(file, path, &format!("{a}.context_length")).unwrap_or(2048),
        sliding_window: None,
        bos_token_id: u32_meta("tokenizer.ggml.bos_token_id"),
        eos_token_ids: u32_meta("tokenizer.ggml.eos_token_id")
            .into_iter()
            .collect(),
        arch: Default::default(),
    };
    let config = family
        .gguf_config(config, file)
        .map_err(|e| e.in_file(path))?;
    config.validate().map_err(|e| e.in_file(path))?;
    Ok(config)
}

/// splitmix64: a tiny deterministic generator for synthetic weights.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deterministic values for a synthetic tensor: norms `1 + 0.2·u`,
/// matrices uniform with standard deviation 0.4 / √fan_in · √fan_in… kept
/// simple: uniform in ±0.4·√3 / √(cols/16) so activations stay O(1).
fn synthetic_values(seed: u64, name: &str, shape: &[usize]) -> Vec<f32> {
    let mut s = seed;
    for b in name.bytes() {
        s = s.wrapping_mul(0x100_0000_01B3) ^ b as u64;
    }
    let n: usize = shape.iter().product();
    let uni = |s: &mut u64| (splitmix(s) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    if shape.len() == 1 {
        (0..n).map(|_| (1.0 + 0.2 * uni(&mut s)) as f32).collect()
    } else {
        let cols = shape[shape.len() - 1] as f64;
        let amp = 0.4 * 3f64.sqrt() / (cols / 16.0).sqrt().max(1.0);
        (0..n).map(|_| (amp * uni(&mut s)) as f32).collect()
    }
}
