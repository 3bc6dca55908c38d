//! The contract's `vocab_size` against the archive: the rows of the
//! embedding and of the head, whether stored plain or in parts.

use super::Check;
use crate::graph::DType;
use crate::manifest::Contract;
use crate::params::irpa::IrpaReader;

impl Check<'_> {
    /// The contract's `vocab_size` against the rows of the embedding (and
    /// of `lm_head`, when the archive holds one) in the archive `irpa`:
    /// exactly when the weights are one plain dtype (the row width is the
    /// final norm's length), as a divisor of the bytes otherwise. A matrix
    /// stored in parts is checked by its rows too: i8 rows (`KEY.q8` or
    /// `KEY.q8x2`) by their one f32 scale per row, GGML blocks (`KEY.qs`…)
    /// by the elements their parts' bytes hold, against the final norm's
    /// length in f32 or 16-bit elements.
    pub(super) fn vocabulary(&mut self, contract: &Contract, irpa: &str, weights_for: &[String]) {
        let manifest = self.manifest.clone();
        if contract.vocab_size == 0 {
            return self.fault(&manifest, "its vocab_size is 0");
        }
        if self.refused.iter().any(|r| r == irpa) {
            return;
        }
        let Some(Ok(archive)) = self.path(irpa).map(IrpaReader::open) else {
            return; // Already a fault of the file or archive checks.
        };
        let len = |key: &str| archive.entry(key).map(|e| e.len());
        let plain = DType::from_mlir(&contract.weights_dtype)
            .filter(|_| weights_for.is_empty())
            .map(|d| d.size() as u64);
        let norm = len("model.norm.weight");
        let width = plain.zip(norm).map(|(size, n)| n / size);
        // The final norm's element size in parts forms: `keep` stores
        // vectors as the GGUF has them (f32), `q8_0`/`q4_0` as bf16.
        let norm_sizes: &[u64] = match contract.weights_dtype.as_str() {
            "keep" => &[4],
            "q8_0" | "q4_0" => &[2],
            _ => &[4, 2],
        };
        let v = contract.vocab_size as u64;
        for key in ["model.embed_tokens.weight", "lm_head.weight"] {
            if let Some(rows) = Self::part_rows(&archive, key, norm, norm_sizes, v) {
                if rows != Some(v) {
                    let rows = rows.map_or(String::new(), |r| format!(": {r} rows"));
                    let what =
                        format!("its vocab_size {v} does not fit {key}'s parts in {irpa}{rows}");
                    self.fault(&manifest, what);
                }
                continue;
            }
            let Some(bytes) = len(key) else { continue };
            let fits = match (plain, width) {
                (Some(size), Some(h)) if h > 0 => bytes == v.saturating_mul(h).saturating_mul(size),
                _ => bytes % v == 0,
            };
            if !fits {
                let rows = match (plain, width) {
                    (Some(size), Some(h)) if h > 0 => {
                        format!(", {} rows of {h}", bytes / (h * size))
                    }
                    _ => String::new(),
                };
                let what = format!(
                    "its vocab_size {v} does not fit {key} in {irpa} ({bytes} bytes{rows})"
                );
                self.fault(&manifest, what);
            }
        }
    }

    /// The rows of `key` when the archive holds it in parts (`None` when it
    /// does not): `Some(rows)` of i8 rows (one f32 scale per row) exactly;
    /// of GGML blocks, `Some(v)` when its elements are `v` rows of the
    /// final norm's length (`norm` bytes of elements of one of `sizes`
    /// bytes), else the rows they would be at the first size's width
    /// (`None` inside when that is not whole).
    fn part_rows(
        archive: &IrpaReader,
        key: &str,
        norm: Option<u64>,
        sizes: &[u64],
        v: u64,
    ) -> Option<Option<u64>> {
        let entry = |suffix: &str| {
            let name = crate::params::blocks::part_key(key, suffix);
            archive.entry(&name).map(|e| e.len())
        };
        let i8_codes = crate::params::quant::I8_ROWS_PARTS[0];
        let i8_scale = crate::params::quant::I8_ROWS_PARTS[1];
        if entry(i8_codes)
            .or_else(|| entry(crate::params::quant::I8_TWO_TERM_CODES))
            .is_some()
        {
            return Some(entry(i8_scale).map(|b| b / 4));
        }
        entry("qs")?;
        let tensors: Vec<(String, Option<DType>, Vec<u64>)> = archive
            .entries()
            .iter()
            .filter(|e| e.name.starts_with(key))
            .map(|e| (e.name.clone(), None, vec![e.len()]))
            .collect();
        let found = crate::params::blocks::recognize(&tensors);
        let elements = found.iter().find(|r| r.name == key)?.elements;
        let widths: Vec<u64> = norm.map_or(vec![], |n| sizes.iter().map(|s| n / s).collect());
        if widths
            .iter()
            .any(|&h| h > 0 && elements == v.saturating_mul(h))
        {
            return Some(Some(v));
        }
        let rows = widths
            .first()
            .filter(|&&h| h > 0 && elements % h == 0)
            .map(|&h| elements / h);
        Some(rows)
    }
}
