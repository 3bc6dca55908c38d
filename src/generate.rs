//! The phone's redecode loop (see `android-contract.md`): the prompt is
//! padded with 0 to SEQ, the whole buffer is run every step, the
//! prediction at the last real position is appended, and generation stops
//! at an end-of-sequence id, after `max_new_tokens`, or when SEQ is full.

use crate::iree::run::{run_module, HostTensor, RunOptions};
use crate::iree::Toolchain;
use crate::{Error, Result};
use std::path::PathBuf;

/// One forward pass of a `tensor<1xSEQxi32> -> tensor<SEQxi32>` function.
pub trait Forward {
    /// Sequence length SEQ.
    fn seq(&self) -> usize;
    /// Runs the function on a full buffer of SEQ ids.
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>>;
}

/// A forward pass through `iree-run-module`, one process per call.
pub struct IreeRunModule {
    /// The toolchain.
    pub toolchain: Toolchain,
    /// The compiled module.
    pub vmfb: PathBuf,
    /// How to run it (function, parameters, device, emulation).
    pub options: RunOptions,
    /// SEQ.
    pub seq: usize,
}

impl Forward for IreeRunModule {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let input = HostTensor::i32(vec![1, self.seq], ids.to_vec())?;
        let out = run_module(&self.toolchain, &self.vmfb, &self.options, &[input])?;
        out.first()
            .and_then(|t| t.as_i32())
            .filter(|v| v.len() == self.seq)
            .map(<[i32]>::to_vec)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "the module did not return tensor<{}xi32>",
                    self.seq
                ))
            })
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The new ids, in order (the eos id is not included).
    pub ids: Vec<i32>,
    /// True when generation stopped at an eos id.
    pub stopped_at_eos: bool,
}

/// Runs the redecode loop from `prompt`, calling `on_token` with each new
/// id as it arrives. The prompt must be shorter than SEQ.
pub fn generate(
    model: &mut dyn Forward,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    mut on_token: impl FnMut(i32),
) -> Result<Generation> {
    let seq = model.seq();
    if prompt.is_empty() {
        return Err(Error::Usage("the prompt is empty".into()));
    }
    if prompt.len() >= seq {
        return Err(Error::Usage(format!(
            "the prompt has {} tokens but SEQ is {seq}: it must be at most SEQ - 1 = {} (export with a larger --seq)",
            prompt.len(),
            seq - 1
        )));
    }
    let mut buf = vec![0i32; seq];
    buf[..prompt.len()].copy_from_slice(prompt);
    let mut ids = Vec::new();
    let mut step = 0;
    while prompt.len() + step < seq && step < max_new_tokens {
        let out = model.forward(&buf)?;
        let next = out[prompt.len() - 1 + step];
        if eos.contains(&next) {
            return Ok(Generation {
                ids,
                stopped_at_eos: true,
            });
        }
        buf[prompt.len() + step] = next;
        ids.push(next);
        on_token(next);
        step += 1;
    }
    Ok(Generation {
        ids,
        stopped_at_eos: false,
    })
}

/// A forward pass through kiln's own interpreter (no IREE): the module is
/// parsed once and the weights are read from the parameter file on each
/// call (memory-mapped).
pub struct Interpreted {
    module: crate::graph::Module,
    function: String,
    params: crate::interp::files::FileParams,
    seq: usize,
}

impl Interpreted {
    /// Parses `mlir` and opens `params` (`.irpa` or `.safetensors`).
    pub fn open(
        mlir: &std::path::Path,
        params: &std::path::Path,
        function: &str,
    ) -> Result<Interpreted> {
        let text = std::fs::read_to_string(mlir).map_err(|e| Error::io(mlir, e))?;
        let module = crate::stablehlo::parse_module(&text).map_err(|e| e.with_file(mlir))?;
        let g = crate::interp::find_function(&module, Some(function))?;
        let seq = g
            .inputs
            .first()
            .and_then(|&v| g.ty(v).shape.last().copied())
            .ok_or_else(|| Error::Usage(format!("function @{function} takes no token ids")))?;
        Ok(Interpreted {
            params: crate::interp::files::FileParams::open(params)?,
            function: function.to_string(),
            module,
            seq,
        })
    }
}

impl Forward for Interpreted {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let g = crate::interp::find_function(&self.module, Some(&self.function))?;
        let shape = g.ty(g.inputs[0]).shape.to_vec();
        let out = crate::interp::run(
            g,
            &[crate::interp::Tensor::i32(&shape, ids.to_vec())],
            &self.params,
        )?;
        out.first()
            .and_then(crate::interp::Tensor::as_i32)
            .map(<[i32]>::to_vec)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "function @{} does not return i32 ids",
                    self.function
                ))
            })
    }
}
