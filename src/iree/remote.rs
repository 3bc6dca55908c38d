//! Sessions in another process: kiln's own runtime program
//! (`kiln-runtime serve`, the workspace crate built for aarch64 or armv7)
//! run under qemu, so `kiln generate --emulate arm64` / `--emulate arm32`
//! loads the module once and runs the whole generation in one process, as
//! a phone would, in place of one `iree-run-module` per step. The line
//! protocol is `kiln_runtime::serve`'s; what differs between the two
//! architectures is only the [`RemoteRuntime`]: the emulator, the program
//! and the device.

use super::run::Emulation;
use super::session::{param_mode, SessionSpec};
use super::toolchain::Toolchain;
use super::{IreeError, Result};
use crate::step::{candidates, Forward, KvSpec, KvStep, Prediction};
use kiln_runtime::Device;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// kiln's runtime program for another architecture and what runs it: the
/// emulator, the (static) program and the device it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRuntime {
    /// The emulator (`qemu-aarch64-static`, `qemu-arm-static`).
    pub qemu: PathBuf,
    /// `kiln-runtime` built for the emulated architecture, static.
    pub runtime: PathBuf,
    /// The device it opens: local-task on aarch64; local-sync on armv7,
    /// whose runtime has no local-task (IREE 3.13's local-task does not
    /// build for 32-bit targets).
    pub device: Device,
}

impl RemoteRuntime {
    /// `runtime` under `qemu`, on `device`.
    pub fn new(qemu: impl Into<PathBuf>, runtime: impl Into<PathBuf>, device: Device) -> Self {
        RemoteRuntime {
            qemu: qemu.into(),
            runtime: runtime.into(),
            device,
        }
    }

    /// The device kiln's runtime program opens for `emulation`.
    pub fn device_for(emulation: Emulation) -> Device {
        match emulation {
            Emulation::Arm64 => Device::LocalTask,
            Emulation::Arm32 => Device::LocalSync,
        }
    }

    /// The emulator and runtime program `tc` found for `emulation`
    /// (`scripts/install-deps.sh` builds them), or `None` when either is
    /// missing.
    pub fn find(tc: &Toolchain, emulation: Emulation) -> Option<RemoteRuntime> {
        let (qemu, runtime) = match emulation {
            Emulation::Arm64 => (&tc.qemu_aarch64, &tc.aarch64_kiln_runtime),
            Emulation::Arm32 => (&tc.qemu_arm, &tc.armv7_kiln_runtime),
        };
        let (qemu, runtime) = qemu.clone().zip(runtime.clone())?;
        Some(RemoteRuntime::new(
            qemu,
            runtime,
            Self::device_for(emulation),
        ))
    }
}

/// What a remote session serves.
pub enum Served<'a> {
    /// The redecode forward `function` over `[1, seq]` ids.
    Redecode {
        /// The function.
        function: &'a str,
    },
    /// The KV pair.
    Kv(&'a KvSpec),
}

/// The runtime process and its pipes.
struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Process {
    /// Starts `remote` serving `served` of `spec`'s module, and waits for
    /// it to load.
    fn start(remote: &RemoteRuntime, spec: &SessionSpec, served: &Served) -> Result<Process> {
        let mode = match param_mode(spec) {
            kiln_runtime::ParamMode::Map => "map",
            kiln_runtime::ParamMode::File => "file",
            _ => "auto",
        };
        let mut cmd = Command::new(&remote.qemu);
        cmd.arg(&remote.runtime).arg("serve").arg(&spec.vmfb);
        cmd.arg("--param")
            .arg(format!("{}={}@{mode}", spec.scope, spec.params.display()));
        let packed = super::pack::packed_archive(&spec.vmfb);
        if packed.is_file() {
            cmd.arg("--param")
                .arg(format!("packed={}@map", packed.display()));
        }
        cmd.args(["--device", remote.device.driver()]);
        if let (Device::LocalTask, Some(n)) = (remote.device, spec.task_groups) {
            cmd.args(["--task-groups", &n.to_string()]);
        }
        match served {
            Served::Redecode { function } => {
                cmd.args(["--function", function]);
            }
            Served::Kv(kv) => {
                for (p, d) in kv.functions() {
                    cmd.arg("--kv").arg(format!("{p},{d}"));
                }
                for c in &kv.caches {
                    let shape: Vec<String> = c.shape.iter().map(|d| d.to_string()).collect();
                    cmd.arg("--cache")
                        .arg(format!("{}:{}", c.dtype, shape.join("x")));
                }
            }
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| IreeError::Spawn {
                tool: remote.runtime.clone(),
                source,
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(IreeError::BadOutput("kiln-runtime: no pipes".into()));
        };
        let mut p = Process {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        let first = p.read_line()?;
        if first != "ready" {
            return Err(p.answer_error(&first));
        }
        Ok(p)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| IreeError::BadOutput(format!("kiln-runtime: {e}")))?;
        if n == 0 {
            let status = self.child.wait().ok();
            return Err(IreeError::BadOutput(format!(
                "kiln-runtime stopped ({})",
                status.map_or("no status".into(), |s| s.to_string())
            )));
        }
        Ok(line.trim_end().to_string())
    }

    /// An `error: …` answer as kiln's error; anything else as a protocol
    /// fault.
    fn answer_error(&self, line: &str) -> IreeError {
        match line.strip_prefix("error: ") {
            Some(message) => IreeError::Runtime(kiln_runtime::Error::Call {
                function: String::new(),
                message: message.to_string(),
            }),
            None => IreeError::BadOutput(format!("kiln-runtime answered: {line}")),
        }
    }

    /// One request, one answer.
    fn request(&mut self, line: &str) -> Result<String> {
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| IreeError::BadOutput(format!("kiln-runtime: {e}")))?;
        let answer = self.read_line()?;
        if answer.starts_with("error: ") {
            return Err(self.answer_error(&answer));
        }
        Ok(answer)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The redecode forward in a `kiln-runtime` process.
pub struct RemoteSession {
    process: Process,
    seq: usize,
}

impl RemoteSession {
    /// Starts `remote` on `spec`'s module serving `function`.
    pub fn start(
        remote: &RemoteRuntime,
        spec: &SessionSpec,
        function: &str,
        seq: usize,
    ) -> Result<RemoteSession> {
        let process = Process::start(remote, spec, &Served::Redecode { function })?;
        Ok(RemoteSession { process, seq })
    }
}

impl Forward for RemoteSession {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> crate::step::Result<Vec<i32>> {
        let answer = self.process.request(&join(ids))?;
        let v = answer
            .split_whitespace()
            .map(|w| w.parse::<i32>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| IreeError::BadOutput(format!("kiln-runtime answered: {answer}")))?;
        if v.len() != self.seq {
            return Err(IreeError::SessionIds {
                got: v.len(),
                seq: self.seq,
            }
            .into());
        }
        Ok(v)
    }
}

/// The KV pair in a `kiln-runtime` process.
pub struct RemoteKvSession {
    process: Process,
    spec: KvSpec,
}

impl RemoteKvSession {
    /// Starts `remote` on `spec`'s module serving `kv`.
    pub fn start(
        remote: &RemoteRuntime,
        spec: &SessionSpec,
        kv: &KvSpec,
    ) -> Result<RemoteKvSession> {
        let process = Process::start(remote, spec, &Served::Kv(kv))?;
        Ok(RemoteKvSession {
            process,
            spec: kv.clone(),
        })
    }

    fn predict(&mut self, line: &str) -> Result<Prediction> {
        let answer = self.process.request(line)?;
        parse_prediction(&answer)
            .ok_or_else(|| IreeError::BadOutput(format!("kiln-runtime answered: {answer}")))
    }
}

/// `ID [top ids… top values…]`.
fn parse_prediction(line: &str) -> Option<Prediction> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (first, rest) = words.split_first()?;
    let id = first.parse().ok()?;
    if rest.len() % 2 != 0 {
        return None;
    }
    let (ids, values) = rest.split_at(rest.len() / 2);
    let ids: Vec<i32> = ids.iter().map(|w| w.parse().ok()).collect::<Option<_>>()?;
    // Each value is printed as the shortest text that reads back as the
    // same f32.
    let values: Vec<f32> = values
        .iter()
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let top = if ids.is_empty() {
        Vec::new()
    } else {
        candidates(&ids, &values)?
    };
    Some(Prediction { id, top })
}

impl KvStep for RemoteKvSession {
    fn prompt_len(&self) -> usize {
        self.spec.prompt_len
    }
    fn max_context(&self) -> usize {
        self.spec.max_context()
    }
    fn reset(&mut self) -> crate::step::Result<()> {
        let answer = self.process.request("r")?;
        if answer != "ok" {
            return Err(IreeError::BadOutput(format!("kiln-runtime answered: {answer}")).into());
        }
        Ok(())
    }
    fn prefill(
        &mut self,
        chunk: &[i32],
        start: usize,
        length: usize,
    ) -> crate::step::Result<Prediction> {
        let f = self.spec.prefill_pair(chunk.len(), start, length)?;
        Ok(self.predict(&format!("p {f} {start} {length} {}", join(chunk)))?)
    }
    fn decode(&mut self, token: i32, position: usize) -> crate::step::Result<Prediction> {
        let f = self.spec.decode_pair(position)?;
        Ok(self.predict(&format!("d {f} {token} {position}"))?)
    }
}
