//! Running a compiled module with `iree-run-module` and reading its results.
//!
//! Inputs go on the command line (`--input=1x8xi32=1,2,…`), or through a
//! temporary `.npy` file when large; results are parsed from stdout, where
//! iree-run-module prints `result[0]: hal.buffer_view` and then `8xi32=8 12 9 …`.

use super::flags::{self, Device};
use super::toolchain::{self, Toolchain};
use super::{IreeError, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Inputs with more elements than this go through a `.npy` file.
const INLINE_MAX_ELEMENTS: usize = 1024;

/// The element data of a [`HostTensor`].
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// 32-bit signed integers.
    I32(Vec<i32>),
    /// 64-bit signed integers.
    I64(Vec<i64>),
    /// 32-bit floats.
    F32(Vec<f32>),
    /// bf16 bit patterns (KV caches of `--kv-dtype bf16`); they go to and
    /// from iree-run-module as raw `.bin` files.
    Bf16(Vec<u16>),
}

impl TensorData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::I32(v) => v.len(),
            TensorData::I64(v) => v.len(),
            TensorData::F32(v) => v.len(),
            TensorData::Bf16(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// IREE's element type name (`i32`, `i64`, `f32`, `bf16`).
    pub fn dtype(&self) -> &'static str {
        match self {
            TensorData::I32(_) => "i32",
            TensorData::I64(_) => "i64",
            TensorData::F32(_) => "f32",
            TensorData::Bf16(_) => "bf16",
        }
    }

    /// The elements' little-endian bytes, as a raw `.bin` file holds them.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            TensorData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::Bf16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// Elements of `dtype` read from little-endian `bytes` (a raw `.bin`
    /// file); `None` when the type is not one of these or a partial
    /// element is left.
    pub fn from_le_bytes(dtype: crate::graph::DType, bytes: &[u8]) -> Option<TensorData> {
        use crate::graph::DType;
        let words = |n: usize| (bytes.len() % n == 0).then(|| bytes.chunks_exact(n));
        Some(match dtype {
            DType::I32 => TensorData::I32(
                words(4)?
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::F32 => TensorData::F32(
                words(4)?
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::BF16 => TensorData::Bf16(
                words(2)?
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            _ => return None,
        })
    }
}

/// A dense tensor on the host: the values passed to and read back from a module.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Dimensions, outermost first (empty for a scalar).
    pub shape: Vec<usize>,
    /// Row-major elements.
    pub data: TensorData,
}

impl HostTensor {
    /// Builds a tensor, checking that the shape matches the element count.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<HostTensor> {
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| IreeError::BadInput(format!("shape {shape:?} overflows")))?;
        if n != data.len() {
            return Err(IreeError::BadInput(format!(
                "shape {shape:?} needs {n} elements, got {}",
                data.len()
            )));
        }
        Ok(HostTensor { shape, data })
    }

    /// An i32 tensor.
    pub fn i32(shape: Vec<usize>, data: Vec<i32>) -> Result<HostTensor> {
        Self::new(shape, TensorData::I32(data))
    }

    /// An f32 tensor.
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Result<HostTensor> {
        Self::new(shape, TensorData::F32(data))
    }

    /// The i32 elements, if this is an i32 tensor.
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            TensorData::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The f32 elements, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// IREE's type spelling, e.g. `1x8xi32` (just `i32` for a scalar).
    pub fn type_string(&self) -> String {
        let mut s = String::new();
        for d in &self.shape {
            s.push_str(&format!("{d}x"));
        }
        s.push_str(self.data.dtype());
        s
    }

    /// The inline `--input=` value: `1x8xi32=1,2,3,…`.
    pub fn input_arg(&self) -> String {
        let vals: Vec<String> = match &self.data {
            TensorData::I32(v) => v.iter().map(|x| x.to_string()).collect(),
            TensorData::I64(v) => v.iter().map(|x| x.to_string()).collect(),
            TensorData::F32(v) => v.iter().map(|x| format!("{x:?}")).collect(),
            TensorData::Bf16(v) => v
                .iter()
                .map(|&x| format!("{:?}", half::bf16::from_bits(x).to_f32()))
                .collect(),
        };
        format!("{}={}", self.type_string(), vals.join(","))
    }

    /// Reads a numpy `.npy` (format 1.x, little-endian `<i4`, `<i8`, `<f4`, C order).
    pub fn from_npy(bytes: &[u8]) -> std::result::Result<HostTensor, String> {
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err("not a .npy file".into());
        }
        let hl = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = bytes
            .get(10..10 + hl)
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or("truncated .npy header")?;
        let data = &bytes[10 + hl..];
        if header.contains("'fortran_order': True") {
            return Err("Fortran-order .npy is not supported".into());
        }
        let shape_text = header
            .split("'shape':")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .map(|s| s.trim().trim_start_matches('('))
            .ok_or("no shape in .npy header")?;
        let shape: Vec<usize> = shape_text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<usize>().map_err(|_| format!("bad dim {s:?}")))
            .collect::<std::result::Result<_, _>>()?;
        let n: usize = shape.iter().product();
        let take = |size: usize| -> std::result::Result<Vec<[u8; 8]>, String> {
            if data.len() != n * size {
                return Err(format!(
                    "{} data bytes for {n} elements of {size} bytes",
                    data.len()
                ));
            }
            Ok(data
                .chunks(size)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a[..size].copy_from_slice(c);
                    a
                })
                .collect())
        };
        let td = if header.contains("'<f4'") {
            TensorData::F32(
                take(4)?
                    .iter()
                    .map(|a| f32::from_le_bytes([a[0], a[1], a[2], a[3]]))
                    .collect(),
            )
        } else if header.contains("'<i4'") {
            TensorData::I32(
                take(4)?
                    .iter()
                    .map(|a| i32::from_le_bytes([a[0], a[1], a[2], a[3]]))
                    .collect(),
            )
        } else if header.contains("'<i8'") {
            TensorData::I64(take(8)?.iter().map(|a| i64::from_le_bytes(*a)).collect())
        } else {
            return Err(format!("unsupported .npy dtype in {header:?}"));
        };
        HostTensor::new(shape, td).map_err(|e| e.to_string())
    }

    /// The tensor as a numpy `.npy` (format 1.0, little-endian, C order).
    pub fn to_npy(&self) -> Vec<u8> {
        let descr = match self.data {
            TensorData::I32(_) => "<i4",
            TensorData::I64(_) => "<i8",
            TensorData::F32(_) => "<f4",
            // numpy has no bf16: the 16-bit patterns (run_module passes
            // bf16 tensors as raw `.bin` files instead).
            TensorData::Bf16(_) => "<u2",
        };
        let shape = match self.shape.len() {
            0 => "()".to_string(),
            1 => format!("({},)", self.shape[0]),
            _ => format!(
                "({})",
                self.shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // magic(6) + version(2) + len(2) + header + '\n' must be a multiple of 64.
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + self.data.len() * 8);
        out.extend_from_slice(b"\x93NUMPY\x01\x00");
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        out
    }
}

/// An architecture to emulate when running (with qemu-user; the
/// `--emulate` value of `kiln run` and `generate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulation {
    /// Run the aarch64 iree-run-module under `qemu-aarch64-static` (or,
    /// for a whole generation, kiln's runtime program built for aarch64).
    Arm64,
    /// Run an armv7 iree-run-module (built from IREE's sources by
    /// `scripts/install-deps.sh`) under `qemu-arm-static` (or, for a whole
    /// generation, kiln's runtime program built for armv7), on local-sync.
    Arm32,
}

impl Emulation {
    /// Parses `arm64` (also `aarch64`) and `arm32` (also `armv7`).
    pub fn parse(s: &str) -> Result<Emulation, IreeError> {
        match s {
            "arm64" | "aarch64" => Ok(Emulation::Arm64),
            "arm32" | "armv7" => Ok(Emulation::Arm32),
            other => Err(IreeError::UnknownEmulation(other.to_string())),
        }
    }
}

/// How to run a module: `default()` (`main` on local-task, no parameters)
/// and the setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunOptions {
    /// The HAL device.
    pub device: Device,
    /// The exported function to call.
    pub function: String,
    /// Parameter files, each bound to a scope (`model`).
    pub params: Vec<(String, PathBuf)>,
    /// Fixed number of local-task worker groups (`--task_topology_group_count`).
    pub task_groups: Option<usize>,
    /// Run the aarch64 runtime under qemu instead of the host runtime.
    pub emulate: Option<Emulation>,
    /// When `Some(n)`, the function's `n` results are read back bit-exactly
    /// through `.npy` files (`--output=@…`) instead of from the printed
    /// text, which rounds floats to 6 digits.
    pub exact_outputs: Option<usize>,
    /// When not empty, the function's results, of these types, are read
    /// back bit-exactly from raw `.bin` files (bf16 included, which `.npy`
    /// cannot hold); it takes the place of `exact_outputs`.
    pub output_types: Vec<crate::graph::TensorType>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            device: Device::LocalTask,
            function: "main".into(),
            params: Vec::new(),
            task_groups: None,
            emulate: None,
            exact_outputs: None,
            output_types: Vec::new(),
        }
    }
}

impl RunOptions {
    /// Sets the HAL device.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Sets the exported function to call.
    pub fn function(mut self, function: impl Into<String>) -> Self {
        self.function = function.into();
        self
    }

    /// Sets the parameter files, each bound to a scope.
    pub fn params(mut self, params: Vec<(String, PathBuf)>) -> Self {
        self.params = params;
        self
    }

    /// Sets the number of local-task worker groups (`None`: IREE's choice).
    pub fn task_groups(mut self, task_groups: impl Into<Option<usize>>) -> Self {
        self.task_groups = task_groups.into();
        self
    }

    /// Sets the emulator to run under (`None`: the host runtime).
    pub fn emulate(mut self, emulate: impl Into<Option<Emulation>>) -> Self {
        self.emulate = emulate.into();
        self
    }

    /// Sets the number of results read back bit-exactly (`None`: printed text).
    pub fn exact_outputs(mut self, exact_outputs: impl Into<Option<usize>>) -> Self {
        self.exact_outputs = exact_outputs.into();
        self
    }

    /// Sets the types of the results, read back bit-exactly from raw files
    /// (empty: `exact_outputs` or the printed text).
    pub fn output_types(mut self, output_types: Vec<crate::graph::TensorType>) -> Self {
        self.output_types = output_types;
        self
    }
}

/// [`IreeError::Io`] on `path`.
fn io(path: impl Into<PathBuf>, source: std::io::Error) -> IreeError {
    IreeError::Io {
        path: path.into(),
        source,
    }
}

/// Builds the command (runtime, or qemu + aarch64 runtime) without arguments.
fn base_command(tc: &Toolchain, emulate: Option<Emulation>) -> Result<Command> {
    match emulate {
        None => Ok(Command::new(&tc.run_module)),
        Some(Emulation::Arm64) => {
            let qemu = tc.qemu_aarch64.as_ref().ok_or_else(|| {
                IreeError::EmulatorMissing(format!(
                    "{} (apt package qemu-user-static)",
                    flags::QEMU_AARCH64
                ))
            })?;
            let run = tc.aarch64_run_module.as_ref().ok_or_else(|| {
                IreeError::EmulatorMissing(format!(
                    "aarch64 iree-run-module (expected in {})",
                    toolchain::aarch64_runtime_dir().display()
                ))
            })?;
            if !toolchain::Toolchain::arm64_libc_present() {
                return Err(IreeError::EmulatorMissing(
                    "arm64 libc (/lib/ld-linux-aarch64.so.1; apt packages libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64)".into(),
                ));
            }
            let mut cmd = Command::new(qemu);
            if let Some(prefix) = toolchain::qemu_ld_prefix() {
                cmd.arg("-L").arg(prefix);
            }
            cmd.arg(run);
            Ok(cmd)
        }
        Some(Emulation::Arm32) => {
            let qemu = tc.qemu_arm.as_ref().ok_or_else(|| {
                IreeError::EmulatorMissing(format!(
                    "{} (apt package qemu-user-static)",
                    flags::QEMU_ARM
                ))
            })?;
            let run = tc.armv7_run_module.as_ref().ok_or_else(|| {
                IreeError::EmulatorMissing(format!(
                    "armv7 iree-run-module (expected in {}; scripts/install-deps.sh builds it)",
                    toolchain::armv7_runtime_dir().display()
                ))
            })?;
            // Static: no loader prefix.
            let mut cmd = Command::new(qemu);
            cmd.arg(run);
            Ok(cmd)
        }
    }
}

/// The iree-run-module arguments for `vmfb` and `opts` (inputs excluded).
/// A module compiled with `--pack` also gets its packed archive, beside it
/// ([`super::pack::packed_archive`]), under scope `packed`.
pub fn run_args(vmfb: &Path, opts: &RunOptions) -> Vec<String> {
    // The armv7 runtime has only local-sync: IREE 3.13's local-task command
    // blocks assume 64-bit pointers (hal/drivers/local_task/block_isa.h).
    let device = match (opts.emulate, opts.device) {
        (Some(Emulation::Arm32), Device::LocalTask) => Device::LocalSync,
        (_, d) => d,
    };
    let mut args = vec![
        device.flag(),
        format!("--module={}", vmfb.display()),
        format!("--function={}", opts.function),
        flags::OUTPUT_MAX_ELEMENTS_FLAG.to_string(),
    ];
    for (scope, path) in &opts.params {
        args.push(flags::parameters_flag(scope, path));
    }
    let packed = super::pack::packed_archive(vmfb);
    if packed.is_file()
        && !opts
            .params
            .iter()
            .any(|(s, _)| s == super::pack::PACKED_SCOPE)
    {
        args.push(flags::parameters_flag(super::pack::PACKED_SCOPE, &packed));
    }
    if let Some(n) = opts.task_groups {
        args.push(flags::task_groups_flag(n));
    }
    args
}

/// Runs `opts.function` of `vmfb` on `inputs` and returns its results.
pub fn run_module(
    tc: &Toolchain,
    vmfb: &Path,
    opts: &RunOptions,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>> {
    if !vmfb.is_file() {
        return Err(io(
            vmfb,
            std::io::Error::new(std::io::ErrorKind::NotFound, "module not found"),
        ));
    }
    for (scope, p) in &opts.params {
        if !p.is_file() {
            return Err(io(
                p,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("parameter file for scope '{scope}' not found"),
                ),
            ));
        }
    }
    let mut cmd = base_command(tc, opts.emulate)?;
    cmd.args(run_args(vmfb, opts));
    // Large inputs go through .npy files in a temporary directory.
    let mut tmpdir: Option<tempfile::TempDir> = None;
    for (i, t) in inputs.iter().enumerate() {
        let bf16 = matches!(t.data, TensorData::Bf16(_));
        if t.data.len() <= INLINE_MAX_ELEMENTS && !t.shape.is_empty() && !bf16 {
            cmd.arg(format!("--input={}", t.input_arg()));
            continue;
        }
        if tmpdir.is_none() {
            tmpdir = Some(
                tempfile::Builder::new()
                    .prefix("kiln-run-")
                    .tempdir()
                    .map_err(|e| io(std::env::temp_dir(), e))?,
            );
        }
        let dir = tmpdir
            .as_ref()
            .map(|d| d.path().to_path_buf())
            .unwrap_or_default();
        if bf16 {
            // numpy has no bf16: the raw bytes, typed on the command line.
            let p = dir.join(format!("input{i}.bin"));
            std::fs::write(&p, t.data.to_le_bytes()).map_err(|e| io(&p, e))?;
            cmd.arg(format!("--input={}=@{}", t.type_string(), p.display()));
            continue;
        }
        let p = dir.join(format!("input{i}.npy"));
        let mut f = std::fs::File::create(&p).map_err(|e| io(&p, e))?;
        f.write_all(&t.to_npy()).map_err(|e| io(&p, e))?;
        cmd.arg(format!("--input=@{}", p.display()));
    }
    let exact = match opts.output_types.len() {
        0 => opts.exact_outputs,
        n => Some(n),
    };
    let ext = if opts.output_types.is_empty() {
        "npy"
    } else {
        "bin"
    };
    let outdir = match exact {
        Some(n) => {
            let d = tempfile::Builder::new()
                .prefix("kiln-out-")
                .tempdir()
                .map_err(|e| io(std::env::temp_dir(), e))?;
            for i in 0..n {
                cmd.arg(format!(
                    "--output=@{}",
                    d.path().join(format!("output{i}.{ext}")).display()
                ));
            }
            Some((d, n))
        }
        None => None,
    };
    let tool = tc.run_module.clone();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| IreeError::Spawn { tool, source })?;
    drop(tmpdir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let msg = super::trim_log(&stderr, 20).replace('\n', " ");
        if opts.device == Device::Vulkan && looks_like_missing_vulkan(&stderr) {
            return Err(IreeError::VulkanUnavailable(msg));
        }
        return Err(IreeError::RunFailed {
            module: vmfb.to_path_buf(),
            status: super::status_text(&out.status),
            stderr: msg,
        });
    }
    match outdir {
        Some((d, n)) => (0..n)
            .map(|i| {
                let p = d.path().join(format!("output{i}.{ext}"));
                let bytes = std::fs::read(&p).map_err(|e| io(&p, e))?;
                let bad = |m: String| IreeError::BadOutput(format!("{}: {m}", p.display()));
                match opts.output_types.get(i) {
                    None => HostTensor::from_npy(&bytes).map_err(bad),
                    Some(ty) => {
                        let data = TensorData::from_le_bytes(ty.dtype, &bytes)
                            .ok_or_else(|| bad(format!("{} bytes are not a {ty}", bytes.len())))?;
                        HostTensor::new(ty.shape.to_vec(), data)
                    }
                }
            })
            .collect(),
        None => parse_outputs(&String::from_utf8_lossy(&out.stdout)),
    }
}

/// True when iree-run-module's error means there is no Vulkan driver/loader.
pub(super) fn looks_like_missing_vulkan(stderr: &str) -> bool {
    [
        "VK_ERROR_INCOMPATIBLE_DRIVER",
        "VK_ERROR_INITIALIZATION_FAILED",
        "vkCreateInstance",
        "libvulkan",
        "no Vulkan",
        "vulkan-1",
    ]
    .iter()
    .any(|p| stderr.contains(p))
        || (stderr.contains("UNAVAILABLE") && stderr.to_ascii_lowercase().contains("vulkan"))
}

/// Parses the results iree-run-module prints on stdout. Lines like
/// `EXEC @main` and `result[0]: hal.buffer_view` are headers; each
/// `SHAPExDTYPE=values` line (optionally after `result[i]: `) is one result.
pub fn parse_outputs(stdout: &str) -> Result<Vec<HostTensor>> {
    let mut out = Vec::new();
    for raw in stdout.lines() {
        let mut line = raw.trim();
        if line.is_empty() || line.starts_with("EXEC ") {
            continue;
        }
        if line.starts_with("result[") {
            match line.split_once("]: ") {
                Some((_, rest)) => line = rest.trim(),
                None => continue,
            }
            if line.starts_with("hal.buffer_view") || line.is_empty() {
                continue;
            }
        }
        out.push(parse_tensor_line(line)?);
    }
    Ok(out)
}

/// Parses one `2x3xf32=[1 2 3][4 5 6]` (or `8xi32=1 2 …`, or `i32=5`) line.
pub fn parse_tensor_line(line: &str) -> Result<HostTensor> {
    let bad = |why: &str| IreeError::BadOutput(format!("{why} in '{}'", truncate(line, 120)));
    let (ty, vals) = line.split_once('=').ok_or_else(|| bad("no '='"))?;
    let mut parts: Vec<&str> = ty.trim().split('x').collect();
    let dtype = parts.pop().ok_or_else(|| bad("no element type"))?;
    let shape: Vec<usize> = parts
        .iter()
        .map(|d| d.parse::<usize>().map_err(|_| bad("bad dimension")))
        .collect::<std::result::Result<_, _>>()?;
    let cleaned = vals.replace(['[', ']'], " ");
    let toks: Vec<&str> = cleaned.split_whitespace().collect();
    if toks.contains(&"...") {
        return Err(bad("output elided"));
    }
    let data = match dtype {
        "i32" | "si32" | "ui32" => TensorData::I32(
            toks.iter()
                .map(|t| t.parse::<i32>().map_err(|_| bad("bad i32 value")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        "i64" | "si64" => TensorData::I64(
            toks.iter()
                .map(|t| t.parse::<i64>().map_err(|_| bad("bad i64 value")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        "f32" => TensorData::F32(
            toks.iter()
                .map(|t| t.parse::<f32>().map_err(|_| bad("bad f32 value")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        other => return Err(bad(&format!("unsupported element type {other}"))),
    };
    HostTensor::new(shape, data).map_err(|_| bad("element count does not match the shape"))
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n).collect();
        format!("{t}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_args_carry_the_task_groups_and_parameters() {
        let o = RunOptions::default()
            .task_groups(2)
            .params(vec![("model".into(), "w.irpa".into())]);
        let args = run_args(Path::new("m.vmfb"), &o);
        assert!(
            args.contains(&"--task_topology_group_count=2".to_string()),
            "{args:?}"
        );
        assert!(
            args.contains(&"--parameters=model=w.irpa".to_string()),
            "{args:?}"
        );
    }

    #[test]
    fn parses_run_module_output() {
        let out = "EXEC @main\nresult[0]: hal.buffer_view\n8xi32=8 12 9 0 1 2 3 4\nresult[1]: hal.buffer_view\n2x3xf32=[1 2.5 -3][4 5 6]\n";
        let t = parse_outputs(out).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0],
            HostTensor::i32(vec![8], vec![8, 12, 9, 0, 1, 2, 3, 4]).unwrap()
        );
        assert_eq!(
            t[1],
            HostTensor::f32(vec![2, 3], vec![1.0, 2.5, -3.0, 4.0, 5.0, 6.0]).unwrap()
        );
        // Older single-line form, and a scalar.
        let t = parse_outputs("result[0]: 4xi32=1 2 3 4\n").unwrap();
        assert_eq!(t[0].as_i32().unwrap(), &[1, 2, 3, 4]);
        assert_eq!(
            parse_tensor_line("i32=5").unwrap().shape,
            Vec::<usize>::new()
        );
        assert!(parse_tensor_line("4xi32=1 2 3").is_err());
        assert!(parse_tensor_line("4xi32=1 2 ...").is_err());
        assert!(parse_tensor_line("4xf16=1 2 3 4").is_err());
        assert!(parse_tensor_line("garbage").is_err());
    }
}
