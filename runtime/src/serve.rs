//! `kiln-runtime serve`: one process that loads a module once and answers
//! one line with one line, for a caller that cannot load it in its own
//! process (kiln on the host driving an arm64 or armv7 build of this crate
//! under qemu: `kiln generate --emulate arm64`).
//!
//! Command line:
//!
//! ```text
//! kiln-runtime serve MODULE [--param SCOPE=PATH[@map|@file|@auto]]... [--device D]
//!     [--task-groups N] (--function NAME | (--kv PREFILL,DECODE)... (--cache DTYPE:D0xD1x...)...)
//! ```
//!
//! Lines (after `ready`):
//! - redecode (`--function`): `id_0 … id_{SEQ-1}` → the SEQ predicted ids;
//! - KV pair (`--kv`, one per span, the pair over all N positions last):
//!   `r` → `ok` (zeroed caches), `p F START LENGTH id_0 … id_{P-1}` (a
//!   prefill with pair F) and `d F TOKEN POSITION` (a decode) → `ID`, then
//!   from a sampling module the K top ids and the K top logits (each f32
//!   printed as the shortest text that reads back exactly).
//!
//! A failure answers `error: MESSAGE` (one line) and the process goes on;
//! a failure to load answers it in place of `ready` and exits 1.

use crate::{
    CacheType, Device, ElementType, Error, Function, KvPair, ParamFile, ParamMode, Result, Session,
    SessionOptions,
};
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// What `serve` runs: parsed from its command line.
#[derive(Debug, Clone)]
pub struct ServeSpec {
    /// The module.
    pub module: PathBuf,
    /// The session's device, workers and parameters.
    pub options: SessionOptions,
    /// The redecode function, or the KV pair.
    pub program: Program,
}

/// The functions a serve process answers for.
#[derive(Debug, Clone)]
pub enum Program {
    /// One forward over `[1, SEQ]` ids.
    Redecode(String),
    /// KV pairs (prefill, decode), and the caches' types.
    Kv(Vec<(String, String)>, Vec<CacheType>),
}

fn usage(message: impl Into<String>) -> Error {
    Error::Call {
        function: String::new(),
        message: message.into(),
    }
}

impl ServeSpec {
    /// Parses the arguments after `serve`.
    pub fn parse(args: &[String]) -> Result<ServeSpec> {
        let mut it = args.iter();
        let module = it.next().ok_or_else(|| usage("serve needs a module"))?;
        let mut options = SessionOptions::new(Device::LocalTask);
        let mut function = None;
        let mut pairs = Vec::new();
        let mut caches = Vec::new();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| usage(format!("{flag} needs a value")))
            };
            match flag.as_str() {
                "--param" => {
                    let v = value()?;
                    let (scope, rest) = v
                        .split_once('=')
                        .ok_or_else(|| usage(format!("--param {v}: SCOPE=PATH")))?;
                    let (path, mode) = match rest.rsplit_once('@') {
                        Some((p, "map")) => (p, ParamMode::Map),
                        Some((p, "file")) => (p, ParamMode::File),
                        Some((p, "auto")) => (p, ParamMode::Auto),
                        _ => (rest, ParamMode::Map),
                    };
                    options = options.param(ParamFile::new(scope, path, mode));
                }
                "--device" => {
                    let v = value()?;
                    options.device =
                        Device::from_name(&v).ok_or_else(|| usage(format!("no device {v}")))?;
                }
                "--task-groups" => {
                    let v = value()?;
                    let n: usize = v
                        .parse()
                        .map_err(|_| usage(format!("--task-groups {v}: a number")))?;
                    options = options.task_groups(n);
                }
                "--function" => function = Some(value()?),
                "--kv" => {
                    let v = value()?;
                    let (p, d) = v
                        .split_once(',')
                        .ok_or_else(|| usage(format!("--kv {v}: PREFILL,DECODE")))?;
                    pairs.push((p.to_string(), d.to_string()));
                }
                "--cache" => {
                    let v = value()?;
                    let (dtype, shape) = v
                        .split_once(':')
                        .ok_or_else(|| usage(format!("--cache {v}: DTYPE:D0xD1x…")))?;
                    let element = ElementType::from_name(dtype)
                        .ok_or_else(|| usage(format!("--cache {v}: no element type {dtype}")))?;
                    let shape = shape
                        .split('x')
                        .map(|d| {
                            d.parse()
                                .map_err(|_| usage(format!("--cache {v}: bad shape")))
                        })
                        .collect::<Result<Vec<usize>>>()?;
                    caches.push(CacheType { element, shape });
                }
                other => return Err(usage(format!("unknown argument {other}"))),
            }
        }
        let program = match (function, pairs.is_empty()) {
            (Some(f), true) => Program::Redecode(f),
            (None, false) if !caches.is_empty() => Program::Kv(pairs, caches),
            _ => {
                return Err(usage(
                    "give --function, or --kv pairs with their --cache types",
                ))
            }
        };
        Ok(ServeSpec {
            module: PathBuf::from(module),
            options,
            program,
        })
    }
}

/// What a loaded serve process holds.
enum Loaded {
    Redecode(Session, Function),
    Kv(KvPair),
}

/// Loads `spec` and answers `input`'s lines on `output` until the input
/// ends. Returns the load error (after writing it) when loading fails.
pub fn serve(spec: &ServeSpec, input: impl BufRead, mut output: impl Write) -> Result<()> {
    let loaded = (|| -> Result<Loaded> {
        let session = Session::open(&spec.module, &spec.options)?;
        Ok(match &spec.program {
            Program::Redecode(name) => {
                let f = session.function(name)?;
                Loaded::Redecode(session, f)
            }
            Program::Kv(pairs, caches) => Loaded::Kv(KvPair::new(session, pairs, caches.clone())?),
        })
    })();
    let mut loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(output, "error: {e}");
            return Err(e);
        }
    };
    let io = |e: std::io::Error| Error::Io {
        path: PathBuf::from("<stdio>"),
        source: e,
    };
    writeln!(output, "ready").map_err(io)?;
    output.flush().map_err(io)?;
    for line in input.lines() {
        let line = line.map_err(io)?;
        let answer = match answer(&mut loaded, &line) {
            Ok(a) => a,
            Err(e) => format!("error: {e}"),
        };
        writeln!(output, "{answer}").map_err(io)?;
        output.flush().map_err(io)?;
    }
    Ok(())
}

fn numbers<T: std::str::FromStr>(words: &[&str]) -> Result<Vec<T>> {
    words
        .iter()
        .map(|w| w.parse().map_err(|_| usage(format!("not a number: {w}"))))
        .collect()
}

fn answer(loaded: &mut Loaded, line: &str) -> Result<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match loaded {
        Loaded::Redecode(session, f) => {
            let ids: Vec<i32> = numbers(&words)?;
            let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
            let input = session.tensor(ElementType::I32, &[1, ids.len()], &bytes)?;
            let outs = session.call(f, &[&input])?;
            let first = outs.first().ok_or_else(|| usage("no result"))?;
            let out = session.read_i32(first)?;
            Ok(join(&out))
        }
        Loaded::Kv(kv) => {
            let step = match words.split_first() {
                Some((&"r", [])) => {
                    kv.reset()?;
                    return Ok("ok".into());
                }
                Some((&"p", rest)) if rest.len() >= 3 => {
                    let head: Vec<i64> = numbers(&rest[..3])?;
                    let ids: Vec<i32> = numbers(&rest[3..])?;
                    kv.prefill(head[0] as usize, &ids, head[1] as i32, head[2] as i32)?
                }
                Some((&"d", rest)) if rest.len() == 3 => {
                    let v: Vec<i64> = numbers(rest)?;
                    kv.decode(v[0] as usize, v[1] as i32, v[2] as i32)?
                }
                _ => return Err(usage(format!("unknown request: {line}"))),
            };
            let mut words = vec![step.id.to_string()];
            words.extend(step.top_ids.iter().map(|i| i.to_string()));
            words.extend(step.top_values.iter().map(|v| format!("{v:?}")));
            Ok(words.join(" "))
        }
    }
}

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}
