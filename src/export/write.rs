//! Writing an export: the weights streamed into both archives at once
//! (one converting thread, one writer thread per file), then every file
//! moved from the staging directory into place, the manifest last.

use super::error::Result;
use super::graphs::Graphs;
use super::layout::Artifact;
use super::plan::{rows_of, tensor_rows_bytes, Entry};
use super::Names;
use crate::graph::DType;
use crate::manifest::ExportManifest;
use crate::models::{Checkpoint, WeightPlan};
use crate::params::irpa::{chunk_key, EntrySpec, IrpaWriter, DATA_ALIGNMENT};
use crate::params::safetensors::{SafetensorsWriter, TensorSpec};
use crate::params::{TensorWriter, Written};
use crate::progress::Progress;
use crate::util::Staging;
use std::path::Path;
use std::sync::mpsc::SyncSender;

/// What the weight-writing pipeline wrote: both archives, the parameter
/// count and the stored bytes.
pub(super) struct WeightFiles {
    /// The safetensors file, hashed.
    pub(super) safetensors: Written,
    /// The irpa file, hashed.
    pub(super) irpa: Written,
    /// Scalar parameters.
    pub(super) count: u64,
    /// Bytes stored.
    pub(super) bytes: u64,
}

/// Creates the safetensors and irpa writers (hashing as they write) for
/// the `stored` entries; the irpa also gets one entry over each row chunk
/// in `chunks` (key, offset, length) that starts on the storage alignment
/// (all of them: chunks are 256-byte aligned), which stores no bytes of its
/// own (spec/irpa.md, "Row-chunk entries").
fn open_archives(
    stored: &[Entry],
    chunks: &[(String, u64, u64)],
    st_path: &Path,
    irpa_path: &Path,
) -> Result<(SafetensorsWriter, IrpaWriter)> {
    let specs: Vec<TensorSpec> = stored
        .iter()
        .map(|e| match e.dtype {
            // safetensors has no i4: the codes' bytes as u8, two per byte.
            DType::I4 => {
                let mut shape = e.shape.clone();
                if let Some(last) = shape.last_mut() {
                    *last = last.div_ceil(2);
                }
                TensorSpec::new(e.name.clone(), crate::params::DType::U8, &shape)
            }
            d => TensorSpec::new(e.name.clone(), d.into(), &e.shape),
        })
        .collect();
    let entries: Vec<EntrySpec> = stored
        .iter()
        .map(|e| EntrySpec::data(e.name.clone(), e.bytes()))
        .chain(
            chunks
                .iter()
                .filter(|(_, offset, _)| offset % DATA_ALIGNMENT == 0)
                .map(|(key, offset, length)| {
                    EntrySpec::part_of(chunk_key(key, *offset), key.clone(), *offset, *length)
                }),
        )
        .collect();
    let meta = vec![("format".to_string(), "pt".to_string())];
    let st = SafetensorsWriter::new_hashed(st_path, &specs, &meta)?;
    let irpa = IrpaWriter::new_hashed(irpa_path, entries)?;
    Ok((st, irpa))
}

/// Writes the `stored` entries of `ckpt` to both archives in `staging`.
///
/// This thread reads and converts each entry in row chunks; two writer
/// threads each write (and hash) one file. Rendezvous channels bound what
/// is in memory to the chunk being converted plus the one being written,
/// whatever the tensor's size. An entry that is one part of several (block
/// forms, i8 rows) converts each chunk's rows again per part.
pub(super) fn write_weights(
    ckpt: &Checkpoint,
    plan: &WeightPlan,
    stored: &[Entry],
    chunks: &[(String, u64, u64)],
    staging: &Staging,
    names: &Names,
    progress: &dyn Progress,
) -> Result<WeightFiles> {
    let (st, irpa) = open_archives(
        stored,
        chunks,
        &staging.path(&names.layout.file(Artifact::Safetensors)),
        &staging.path(&names.layout.file(Artifact::Irpa)),
    )?;
    progress.start(WRITING, stored.len() as u64, crate::progress::Unit::Tensors);
    let written = std::thread::scope(|scope| -> Result<_> {
        let (st_tx, st_rx) = std::sync::mpsc::sync_channel::<Piece<'_>>(0);
        let (irpa_tx, irpa_rx) = std::sync::mpsc::sync_channel::<Piece<'_>>(0);
        let st_thread = scope.spawn(move || drain(st, st_rx));
        let irpa_thread = scope.spawn(move || drain(irpa, irpa_rx));
        let sent = send_entries(ckpt, plan, stored, (&st_tx, &irpa_tx), progress);
        drop((st_tx, irpa_tx));
        let join = |h: std::thread::ScopedJoinHandle<'_, Result<Written>>| {
            h.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        };
        let (st_w, irpa_w) = (join(st_thread), join(irpa_thread));
        let (count, bytes) = sent?;
        Ok(WeightFiles {
            safetensors: st_w?,
            irpa: irpa_w?,
            count,
            bytes,
        })
    });
    progress.finish(WRITING, written.is_ok());
    written
}

/// The converting side of [`write_weights`]: reads every entry of
/// `stored` in row chunks and sends it to both writers. Stops early when a
/// writer has stopped (its join reports why). Returns the parameter count
/// and the bytes sent, or the first read error.
fn send_entries<'a>(
    ckpt: &Checkpoint,
    plan: &WeightPlan,
    stored: &'a [Entry],
    (st, irpa): (&SyncSender<Piece<'a>>, &SyncSender<Piece<'a>>),
    progress: &dyn Progress,
) -> Result<(u64, u64)> {
    let mut count = 0u64;
    let mut bytes_total = 0u64;
    for e in stored {
        let (n, s) = &ckpt.tensors()[e.tensor];
        let storage = plan.storage(n);
        let rows = rows_of(s);
        let step = (CHUNK_VALUES / (s.iter().product::<usize>() / rows).max(1)).max(1);
        if !send_both(st, irpa, &|| Piece::Begin(&e.name)) {
            return Ok((count, bytes_total));
        }
        for start in (0..rows).step_by(step) {
            let chunk = start..(start + step).min(rows);
            let mut b = tensor_rows_bytes(ckpt, n, s, storage, chunk)?;
            let bytes = std::sync::Arc::new(b.swap_remove(e.part));
            bytes_total += bytes.len() as u64;
            if !send_both(st, irpa, &|| Piece::Rows(bytes.clone())) {
                return Ok((count, bytes_total));
            }
        }
        if !send_both(st, irpa, &|| Piece::End) {
            return Ok((count, bytes_total));
        }
        if e.part == 0 {
            count += s.iter().product::<usize>() as u64;
        }
        progress.advance(WRITING, 1);
    }
    Ok((count, bytes_total))
}

/// What the converting thread sends each writer thread: an entry begins,
/// its next converted rows (shared by both writers), or it ends.
enum Piece<'a> {
    Begin(&'a str),
    Rows(std::sync::Arc<Vec<u8>>),
    End,
}

/// A writer thread's body: writes every entry that arrives on `rx` (in
/// order, chunk by chunk), then finishes the file.
fn drain<W: TensorWriter>(mut w: W, rx: std::sync::mpsc::Receiver<Piece<'_>>) -> Result<Written> {
    for piece in rx {
        match piece {
            Piece::Begin(name) => w.begin_tensor(name)?,
            Piece::Rows(bytes) => w.write_chunk(&bytes)?,
            Piece::End => w.end_tensor()?,
        }
    }
    Ok(w.finish_written()?)
}

/// Sends `piece` to both writers; false when one has stopped (on an
/// error, which its join reports).
fn send_both<'a>(
    a: &std::sync::mpsc::SyncSender<Piece<'a>>,
    b: &std::sync::mpsc::SyncSender<Piece<'a>>,
    piece: &dyn Fn() -> Piece<'a>,
) -> bool {
    a.send(piece()).is_ok() && b.send(piece()).is_ok()
}

/// Values converted per chunk: 4 MiB of f32, whatever the tensor's size.
const CHUNK_VALUES: usize = 1 << 20;

/// The progress step of the weight-writing pipeline.
const WRITING: &str = "writing weights";

/// Writes `manifest` into `staging`, then moves every file into place, the
/// manifest last.
pub(super) fn commit(
    staging: Staging,
    names: &Names,
    graphs: &Graphs,
    manifest: &ExportManifest,
) -> Result<()> {
    let json = manifest.to_json();
    let file = |a| names.layout.file(a);
    let manifest_file = file(Artifact::Manifest);
    crate::util::write_atomic(staging.path(&manifest_file), json.as_bytes())?;
    let mut done = vec![
        file(Artifact::Mlir),
        file(Artifact::Safetensors),
        file(Artifact::Irpa),
    ];
    if graphs.kv.is_some() {
        done.insert(1, file(Artifact::KvMlir));
    }
    staging.commit(&done, &manifest_file)?;
    Ok(())
}
