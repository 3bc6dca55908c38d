//! A long-lived forward-pass runner for `kiln generate`: the module and the
//! parameters are loaded once, then each step sends SEQ ids and reads SEQ
//! predicted ids back.
//!
//! `iree-run-module` loads the module and maps the parameters on every
//! call. Linking IREE's C runtime into kiln would need a C toolchain and
//! IREE's sources at build time, which kiln's users do not have; the
//! pinned `iree-base-runtime` wheel already ships IREE's runtime with
//! Python bindings. So the session is a small script (`session.py`,
//! embedded in the binary) run by the pinned venv's Python, speaking one
//! line of ids per step over pipes. Why and how much it saves: `spec/iree.md`.
//!
//! The sessions only implement the step interfaces of [`crate::step`]:
//! [`Session`] is a [`Forward`], [`KvSession`] a [`KvStep`]. Each is
//! started from a [`SessionSpec`] (module, parameters, device) and what it
//! serves (a function and SEQ, or a [`KvSpec`]).

use super::flags::Device;
use super::{IreeError, Result, Toolchain};
use crate::step::{candidates, check_chunk, check_position, Forward, KvSpec, KvStep, Prediction};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

const SCRIPT: &str = include_str!("session.py");

/// Where and how a session runs: the module, its parameter file and
/// scope, the device. [`SessionSpec::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct SessionSpec {
    /// The compiled module.
    pub vmfb: PathBuf,
    /// The parameter archive.
    pub params: PathBuf,
    /// Its scope in the module (`model`).
    pub scope: String,
    /// Runtime device.
    pub device: Device,
    /// local-task worker groups (`None`: IREE's default).
    pub task_groups: Option<usize>,
}

impl SessionSpec {
    /// `vmfb` over the parameter archive `params` in scope `model`, on the
    /// default device with IREE's default worker groups.
    pub fn new(vmfb: impl Into<PathBuf>, params: impl Into<PathBuf>) -> SessionSpec {
        SessionSpec {
            vmfb: vmfb.into(),
            params: params.into(),
            scope: "model".into(),
            device: Device::default(),
            task_groups: None,
        }
    }

    /// Sets the parameter scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// Sets the runtime device.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Sets the local-task worker groups (`None`: IREE's default).
    pub fn task_groups(mut self, task_groups: impl Into<Option<usize>>) -> Self {
        self.task_groups = task_groups.into();
        self
    }
}

/// What a runner serves: the redecode forward or the KV-cache pair.
enum Program<'a> {
    Redecode { function: &'a str, seq: usize },
    Kv(&'a KvSpec),
}

/// The runner's command line after the script: the module and the
/// parameter file (paths, passed as they are), then everything else as
/// one JSON object (the one place the wire format is built; session.py
/// reads it).
fn runner_args(spec: &SessionSpec, program: &Program, map_params: bool) -> [std::ffi::OsString; 3] {
    let packed = super::pack::packed_archive(&spec.vmfb);
    let mut wire = serde_json::json!({
        "packed": packed.is_file().then(|| packed.to_string_lossy().into_owned()),
        "map_params": map_params,
        "scope": spec.scope,
        "device": spec.device.name(),
        "task_groups": spec.task_groups,
    });
    match program {
        Program::Redecode { function, seq } => {
            wire["function"] = (*function).into();
            wire["seq"] = (*seq).into();
        }
        Program::Kv(kv) => {
            wire["seq"] = kv.prompt_len.into();
            wire["kv"] = serde_json::json!({
                "functions": kv.functions(),
                "caches": kv.caches.iter().map(|c| serde_json::json!({
                    "shape": &c.shape[..],
                    "dtype": c.dtype.to_string(),
                })).collect::<Vec<_>>(),
            });
        }
    }
    [
        spec.vmfb.clone().into(),
        spec.params.clone().into(),
        wire.to_string().into(),
    ]
}

/// The runner process and its line protocol (one request line, one
/// answer line).
struct Runner {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The Python interpreter of the toolchain's venv, when it has one with
/// IREE's runtime bindings.
pub fn venv_python(tc: &Toolchain) -> Option<PathBuf> {
    let root = tc.root.as_ref()?;
    let py = root.join("bin/python");
    py.is_file().then_some(py)
}

impl Runner {
    /// Starts the runner on `program` and waits until the module is loaded.
    fn start(tc: &Toolchain, spec: &SessionSpec, program: &Program) -> Result<Runner> {
        let py = venv_python(tc).ok_or_else(|| IreeError::NoSessionVenv {
            run_module: tc.run_module.clone(),
        })?;
        // Mapped, only the archive's pages a module reads are resident: a
        // module packed at compile time reads only what is not packed (a
        // gathered embedding's rows, norms, scales), and any CPU module
        // reads only the gathered rows of a table no product takes (a
        // `w8a16e` embedding's second term: Gemma 3 `fast` packed at load
        // 787 → 634 MB, the same ids). Not when the module reads a
        // parameter slice past an entry's start, which the mapped mode of
        // iree-base-runtime 3.13 reads from the entry's start (session.py),
        // nor on Vulkan, which copies every parameter to the device anyway.
        let map_params = (super::pack::packed_archive(&spec.vmfb).is_file()
            || spec.device != super::Device::Vulkan)
            && super::inspect::inspect_module(tc, &spec.vmfb)
                .is_ok_and(|m| m.parameters.iter().all(|r| r.offset == 0));
        let mut child = Command::new(&py)
            .arg("-c")
            .arg(SCRIPT)
            .args(runner_args(spec, program, map_params))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| IreeError::Io {
                path: py.clone(),
                source,
            })?;
        let stdin = child.stdin.take().ok_or_else(|| IreeError::SessionPipe {
            op: "writing to",
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "no stdin"),
        })?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| IreeError::SessionPipe {
            op: "reading from",
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "no stdout"),
        })?);
        let mut r = Runner {
            child,
            stdin,
            stdout,
        };
        let first = r.read_line()?;
        if first.trim() != "ready" {
            return Err(r.failure("loading the module"));
        }
        Ok(r)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|source| IreeError::SessionPipe {
                op: "reading from",
                source,
            })?;
        if n == 0 {
            return Err(self.failure("running"));
        }
        Ok(line)
    }

    /// The runner died: its stderr, last lines, as the error.
    fn failure(&mut self, during: &'static str) -> IreeError {
        let _ = self.child.kill();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        IreeError::SessionFailed {
            during,
            stderr: tail.join(" | "),
        }
    }

    /// Sends one request line and reads the answer line.
    fn request(&mut self, line: &str) -> Result<String> {
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|source| IreeError::SessionPipe {
                op: "writing to",
                source,
            })?;
        self.read_line()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running session over the redecode forward of one module: each step
/// sends SEQ ids and reads SEQ predicted ids back.
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct Session {
    runner: Runner,
    seq: usize,
}

impl Session {
    /// Starts the runner on `spec`'s module, serving `function` (taking
    /// `[1, seq]` ids), and waits until the module is loaded.
    pub fn start(
        tc: &Toolchain,
        spec: &SessionSpec,
        function: &str,
        seq: usize,
    ) -> Result<Session> {
        let runner = Runner::start(tc, spec, &Program::Redecode { function, seq })?;
        Ok(Session { runner, seq })
    }

    /// Runs one forward pass on SEQ ids.
    pub fn run(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let line = join_ids(ids);
        let out = self.runner.request(&line)?;
        let v: Vec<i32> = out
            .split_whitespace()
            .map(|t| t.parse::<i32>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| unexpected(&out))?;
        if v.len() != self.seq {
            return Err(IreeError::SessionIds {
                got: v.len(),
                seq: self.seq,
            });
        }
        Ok(v)
    }
}

impl Forward for Session {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> crate::step::Result<Vec<i32>> {
        Ok(self.run(ids)?)
    }
}

/// The session's failures are the runtime's, kept whole.
impl From<IreeError> for crate::step::CallError {
    fn from(e: IreeError) -> Self {
        crate::step::CallError::runtime(e)
    }
}

/// A runner's answer that is not the protocol's.
fn unexpected(line: &str) -> IreeError {
    IreeError::SessionOutput {
        line: line.trim().to_string(),
    }
}

fn join_ids(ids: &[i32]) -> String {
    ids.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A session over a KV-cache module (`kiln export --kv-cache`): prefill
/// and decode loaded once, the K/V caches kept on the device between
/// calls (each call's result buffers are the next call's arguments, and
/// IREE writes the results into them in place).
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct KvSession {
    runner: Runner,
    spec: KvSpec,
}

impl KvSession {
    /// Starts the runner on the pair `kv` of `spec`'s module.
    pub fn start(tc: &Toolchain, spec: &SessionSpec, kv: &KvSpec) -> Result<KvSession> {
        let runner = Runner::start(tc, spec, &Program::Kv(kv))?;
        Ok(KvSession {
            runner,
            spec: kv.clone(),
        })
    }

    /// The index of the function pair of a call whose positions end
    /// before `end` (into [`KvSpec::functions`]): the smallest span that
    /// holds them.
    fn function_for(&self, end: usize) -> usize {
        self.spec
            .spans
            .iter()
            .position(|s| end <= s.span)
            .unwrap_or(self.spec.spans.len())
    }

    /// The runner's process id (the tests read its threads' scheduling
    /// policy).
    pub fn pid(&self) -> u32 {
        self.runner.child.id()
    }

    /// Sends a prefill or decode line; reads `NEXT` or, from a sampling
    /// module, `NEXT id_0 … id_{K-1} value_0 … value_{K-1}`.
    fn predict(&mut self, line: &str) -> Result<Prediction> {
        let out = self.runner.request(line)?;
        parse_prediction(&out).ok_or_else(|| unexpected(&out))
    }
}

impl KvStep for KvSession {
    fn prompt_len(&self) -> usize {
        self.spec.prompt_len
    }
    fn max_context(&self) -> usize {
        self.spec.max_context()
    }
    fn reset(&mut self) -> crate::step::Result<()> {
        let out = self.runner.request("r")?;
        if out.trim() != "ok" {
            return Err(unexpected(&out).into());
        }
        Ok(())
    }
    fn prefill(
        &mut self,
        chunk: &[i32],
        start: usize,
        length: usize,
    ) -> crate::step::Result<Prediction> {
        check_chunk(
            chunk.len(),
            self.spec.prompt_len,
            start,
            length,
            self.max_context(),
        )?;
        let f = self.function_for(start + length);
        Ok(self.predict(&format!("p {f} {start} {length} {}", join_ids(chunk)))?)
    }
    fn decode(&mut self, token: i32, position: usize) -> crate::step::Result<Prediction> {
        check_position(position, self.max_context())?;
        let f = self.function_for(position + 1);
        Ok(self.predict(&format!("d {f} {token} {position}"))?)
    }
}

/// Reads a runner's prediction line (see [`KvSession::predict`]).
fn parse_prediction(line: &str) -> Option<Prediction> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (first, rest) = words.split_first()?;
    let id = first.parse().ok()?;
    if rest.len() % 2 != 0 {
        return None;
    }
    let (ids, values) = rest.split_at(rest.len() / 2);
    let ids: Vec<i32> = ids.iter().map(|w| w.parse().ok()).collect::<Option<_>>()?;
    // Each value is an f32 printed as the shortest f64 text that reads
    // back exactly (Python's repr), so the conversion is exact.
    let values: Vec<f32> = values
        .iter()
        .map(|w| w.parse::<f64>().ok().map(|v| v as f32))
        .collect::<Option<_>>()?;
    let top = if ids.is_empty() {
        Vec::new()
    } else {
        candidates(&ids, &values)?
    };
    Some(Prediction { id, top })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, TensorType};

    #[test]
    fn the_runner_reads_the_spec_as_one_json_object() {
        let spec = SessionSpec::new("m.vmfb", "m.irpa").task_groups(2);
        let cache = TensorType::new(DType::BF16, &[2, 1, 8, 4]);
        let kv = KvSpec::new("prefill", "decode", 4, cache, 1)
            .unwrap()
            .spans(vec![crate::step::KvSpan::new(4, "prefill_4", "decode_4")])
            .unwrap();
        let [vmfb, params, wire] = runner_args(&spec, &Program::Kv(&kv), false);
        assert_eq!(
            (vmfb.to_str(), params.to_str()),
            (Some("m.vmfb"), Some("m.irpa"))
        );
        let wire: serde_json::Value = serde_json::from_str(wire.to_str().unwrap()).unwrap();
        assert_eq!(
            wire,
            serde_json::json!({
                "packed": null, "map_params": false, "scope": "model", "device": "local-task", "task_groups": 2, "seq": 4,
                "kv": {"functions": [["prefill_4", "decode_4"], ["prefill", "decode"]], "caches": [
                    {"shape": [2, 1, 8, 4], "dtype": "bf16"},
                    {"shape": [2, 1, 8, 4], "dtype": "bf16"},
                ]},
            })
        );
        let spec = SessionSpec::new("m.vmfb", "m.irpa").device(Device::Vulkan);
        let [_, _, wire] = runner_args(
            &spec,
            &Program::Redecode {
                function: "m",
                seq: 8,
            },
            false,
        );
        let wire: serde_json::Value = serde_json::from_str(wire.to_str().unwrap()).unwrap();
        assert_eq!(
            wire,
            serde_json::json!({
                "packed": null, "map_params": false, "scope": "model", "device": "vulkan", "task_groups": null,
                "function": "m", "seq": 8,
            })
        );
    }
}
