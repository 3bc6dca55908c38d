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

use super::flags::Device;
use super::{IreeError, Toolchain};
use crate::{Error, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

const SCRIPT: &str = include_str!("session.py");

/// A running session over one module and one parameter file.
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    seq: usize,
}

/// The Python interpreter of the toolchain's venv, when it has one with
/// IREE's runtime bindings.
pub fn venv_python(tc: &Toolchain) -> Option<PathBuf> {
    let root = tc.root.as_ref()?;
    let py = root.join("bin/python");
    py.is_file().then_some(py)
}

impl Session {
    /// Starts the runner and waits until the module is loaded.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        tc: &Toolchain,
        vmfb: &Path,
        params: &Path,
        scope: &str,
        function: &str,
        device: Device,
        seq: usize,
        task_groups: Option<usize>,
    ) -> Result<Session> {
        let py = venv_python(tc).ok_or_else(|| {
            IreeError::Session(format!(
                "no Python venv with IREE's runtime beside {} (run `kiln toolchain install`)",
                tc.run_module.display()
            ))
        })?;
        let mut child = Command::new(&py)
            .arg("-c")
            .arg(SCRIPT)
            .arg(vmfb)
            .arg(params)
            .arg(scope)
            .arg(function)
            .arg(device.name())
            .arg(seq.to_string())
            .arg(task_groups.map(|n| n.to_string()).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(&py, e))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| IreeError::Session("no stdin".into()))?;
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| IreeError::Session("no stdout".into()))?,
        );
        let mut s = Session {
            child,
            stdin,
            stdout,
            seq,
        };
        let first = s.read_line()?;
        if first.trim() != "ready" {
            return Err(s.failure("loading the module"));
        }
        Ok(s)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| IreeError::Session(format!("reading from the runner: {e}")))?;
        if n == 0 {
            return Err(self.failure("running"));
        }
        Ok(line)
    }

    /// The runner died: its stderr, last lines, as the error.
    fn failure(&mut self, what: &str) -> Error {
        let _ = self.child.kill();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        IreeError::Session(format!(
            "IREE runtime session failed while {what}: {}",
            tail.join(" | ")
        ))
        .into()
    }

    /// Sends one request line and reads the answer line.
    fn request(&mut self, line: &str) -> Result<String> {
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| IreeError::Session(format!("writing to the runner: {e}")))?;
        self.read_line()
    }

    /// Runs one forward pass on SEQ ids.
    pub fn run(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let line = join_ids(ids);
        let out = self.request(&line)?;
        let v: Vec<i32> = out
            .split_whitespace()
            .map(|t| t.parse::<i32>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| IreeError::Session(format!("unexpected runner output: {}", out.trim())))?;
        if v.len() != self.seq {
            return Err(IreeError::Session(format!(
                "the runner returned {} ids, expected SEQ = {}",
                v.len(),
                self.seq
            ))
            .into());
        }
        Ok(v)
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
pub struct KvSession {
    inner: Session,
    prompt_len: usize,
    max_context: usize,
}

impl KvSession {
    /// Starts the runner on the pair `kv` of `vmfb`.
    pub fn start(
        tc: &Toolchain,
        vmfb: &Path,
        params: &Path,
        scope: &str,
        kv: &crate::manifest::KvPair,
        device: Device,
        task_groups: Option<usize>,
    ) -> Result<KvSession> {
        let cache = kv.cache_type()?;
        let shape = cache
            .shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        // The runner reads "PREFILL,DECODE,SHAPExDTYPE,COUNT" as the function.
        let inner = Session::start(
            tc,
            vmfb,
            params,
            scope,
            &format!(
                "{},{},{shape}x{},{}",
                kv.prefill, kv.decode, cache.dtype, kv.cache_count
            ),
            device,
            kv.prompt_len,
            task_groups,
        )?;
        Ok(KvSession {
            inner,
            prompt_len: kv.prompt_len,
            max_context: kv.max_context,
        })
    }

    /// Sends a prefill or decode line; reads `NEXT` or, from a sampling
    /// module, `NEXT id_0 … id_{K-1} value_0 … value_{K-1}`.
    fn predict(&mut self, line: &str) -> Result<crate::generate::Prediction> {
        let out = self.inner.request(line)?;
        parse_prediction(&out).ok_or_else(|| {
            IreeError::Session(format!("unexpected runner output: {}", out.trim())).into()
        })
    }
}

impl crate::generate::KvStep for KvSession {
    fn prompt_len(&self) -> usize {
        self.prompt_len
    }
    fn max_context(&self) -> usize {
        self.max_context
    }
    fn reset(&mut self) -> Result<()> {
        let out = self.inner.request("r")?;
        if out.trim() != "ok" {
            return Err(
                IreeError::Session(format!("unexpected runner output: {}", out.trim())).into(),
            );
        }
        Ok(())
    }
    fn prefill(
        &mut self,
        chunk: &[i32],
        start: usize,
        length: usize,
    ) -> Result<crate::generate::Prediction> {
        crate::generate::check_chunk(
            chunk.len(),
            self.prompt_len,
            start,
            length,
            self.max_context,
        )?;
        self.predict(&format!("p {start} {length} {}", join_ids(chunk)))
    }
    fn decode(&mut self, token: i32, position: usize) -> Result<crate::generate::Prediction> {
        crate::generate::check_position(position, self.max_context)?;
        self.predict(&format!("d {token} {position}"))
    }
}

/// Reads a runner's prediction line (see [`KvSession::predict`]).
fn parse_prediction(line: &str) -> Option<crate::generate::Prediction> {
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
        crate::generate::candidates(&ids, &values)?
    };
    Some(crate::generate::Prediction { id, top })
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl crate::generate::Forward for Session {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        self.run(ids)
    }
}
