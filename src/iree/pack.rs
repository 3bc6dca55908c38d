//! Packing at compile time (`kiln compile --pack`, spec/iree.md "Packed at
//! compile time"): iree-compile reads the weights of the matrix products
//! from the export's archive, packs them into its CPU kernels' tile layout
//! while it compiles, and writes the packed weights to a second archive,
//! which the module reads under the scope [`PACKED_SCOPE`]. kiln then
//! stores each distinct packed tensor once ([`share_duplicates`]): the
//! prefill and decode functions of a KV module get two identical entries
//! for every weight, and a runtime that maps the archive holds their bytes
//! once. Nothing is packed at load.

use crate::graph::{Graph, GraphError, Module, Node, Op, Value};
use crate::params::irpa::{chunk_key, EntrySpec, IrpaReader, IrpaWriter};
use crate::params::{ParamsError, TensorWriter};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The parameter scope of a packed archive in the module.
pub const PACKED_SCOPE: &str = "packed";

/// The packed archive of a module compiled with `--pack`: the module's
/// path with `.packed.irpa` in place of `.vmfb`
/// (`NAME-kv-host.vmfb` → `NAME-kv-host.packed.irpa`). kiln's runners
/// (`kiln run`, `generate`, `chat`, the tests) pass it, when it exists,
/// under [`PACKED_SCOPE`].
pub fn packed_archive(vmfb: &Path) -> PathBuf {
    let name = vmfb
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".vmfb").unwrap_or(&name);
    vmfb.with_file_name(format!("{stem}.packed.irpa"))
}

/// Whether every use of node `i` ends in a product operand through
/// conversions, reshapes and transposes (and there is at least one use).
fn to_dots(i: usize, nodes: &[Node], users: &[Vec<usize>]) -> bool {
    !users[i].is_empty() && users[i].iter().all(|&u| on_product_path(u, nodes, users))
}

/// Whether node `u`, as a user, leads only to products: a `dot_general`,
/// or a conversion, reshape, transpose or block widening
/// ([`Op::DequantizeBlocks`], the `keep`, `q8_0` and `q4_0` matrices) whose
/// every use does.
fn on_product_path(u: usize, nodes: &[Node], users: &[Vec<usize>]) -> bool {
    match nodes[u].op {
        Op::DotGeneral(_) => true,
        Op::Convert | Op::Reshape | Op::Transpose { .. } | Op::DequantizeBlocks(_) => {
            to_dots(u, nodes, users)
        }
        _ => false,
    }
}

/// Each node's users, by index.
fn users_of(g: &Graph) -> Vec<Vec<usize>> {
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); g.nodes().len()];
    for (i, n) in g.nodes().iter().enumerate() {
        for a in &n.args {
            users[a.index()].push(i);
        }
    }
    users
}

/// The keys of the whole-entry parameters whose every use, in every
/// function, reaches a `dot_general` operand through element conversions,
/// reshapes, transposes and block widenings only: the weights IREE packs
/// for its matrix kernels (a block-quantized matrix's codes, scales and
/// minimums are packed as the f32 matrix they widen to), in the module's
/// order. A parameter that is also gathered, sliced, or used elementwise (a
/// norm, a per-row scale) is left out: imported, its raw bytes would be compiled into the
/// module. ([`split_products`] first gives a tied embedding's products a key
/// of their own.)
pub fn packable_keys(module: &Module) -> Vec<String> {
    let mut ok: HashMap<&str, bool> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for g in &module.functions {
        let nodes = g.nodes();
        let users = users_of(g);
        for (i, n) in nodes.iter().enumerate() {
            if let Op::Parameter { key, offset } = &n.op {
                // A row-chunk slice is left out: iree-compile 3.13 crashes
                // importing one (SIGSEGV in `raw_inplace_ostream::write_impl`).
                // An i4 one too: iree-compile 3.13 does not import it
                // ("not importing parameter … as packed types are not yet
                // supported", once per key); it is packed at load.
                let good = offset.is_none()
                    && n.ty.dtype != crate::graph::DType::I4
                    && to_dots(i, nodes, &users);
                match ok.get_mut(key.as_str()) {
                    Some(v) => *v &= good,
                    None => {
                        ok.insert(key, good);
                        order.push(key);
                    }
                }
            }
        }
    }
    // A block widening is packed whole or not at all: were only some of
    // its parts imported, they would be compiled into the module as
    // constants and the widening still made at load.
    let mut changed = true;
    while changed {
        changed = false;
        for g in &module.functions {
            let nodes = g.nodes();
            for n in nodes {
                if !matches!(n.op, Op::DequantizeBlocks(_)) {
                    continue;
                }
                let roots: Vec<Option<&str>> =
                    n.args.iter().map(|a| root_key(a.index(), nodes)).collect();
                let whole = roots.iter().all(|r| r.is_some_and(|k| ok[k]));
                if !whole {
                    for k in roots.into_iter().flatten() {
                        if let Some(v) = ok.get_mut(k) {
                            changed |= std::mem::replace(v, false);
                        }
                    }
                }
            }
        }
    }
    order
        .into_iter()
        .filter(|k| ok[k])
        .map(str::to_string)
        .collect()
}

/// The key of the whole-entry parameter node `i` reads, through
/// conversions, reshapes and transposes; `None` for anything else.
fn root_key(i: usize, nodes: &[Node]) -> Option<&str> {
    match root_param(i, nodes)? {
        (key, None) => Some(key),
        (_, Some(_)) => None,
    }
}

/// The parameter node that node `i` reads, through conversions, reshapes and
/// transposes; `None` for anything else.
fn root_node(i: usize, nodes: &[Node]) -> Option<&Node> {
    match &nodes[i].op {
        Op::Parameter { .. } => Some(&nodes[i]),
        Op::Convert | Op::Reshape | Op::Transpose { .. } => {
            root_node(nodes[i].args[0].index(), nodes)
        }
        _ => None,
    }
}

/// The parameter node `i` reads ([`root_node`]), whole or a row-chunk
/// slice: its key and offset.
fn root_param(i: usize, nodes: &[Node]) -> Option<(&str, Option<u64>)> {
    match &root_node(i, nodes)?.op {
        Op::Parameter { key, offset } => Some((key, *offset)),
        _ => None,
    }
}

/// Whether the parameter node `i` reads ([`root_node`]) is i4.
fn root_is_i4(i: usize, nodes: &[Node]) -> bool {
    root_node(i, nodes).is_some_and(|n| n.ty.dtype == crate::graph::DType::I4)
}

/// The suffix of the key [`split_products`] gives a parameter's products.
pub const PRODUCTS_SUFFIX: &str = "#products";

/// One key [`split_products`] gave a product path: the new key, the key it
/// reads the bytes of, and for a row-chunk slice its byte range in that
/// entry (offset, length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitKey {
    /// The key the module's products now read (`KEY#products`, or
    /// `KEY@OFFSET#products` for a slice).
    pub key: String,
    /// The export's key whose bytes it holds.
    pub source: String,
    /// The slice of `source`'s entry it holds (offset, length in bytes);
    /// `None` for the whole entry.
    pub range: Option<(u64, u64)>,
}

/// A module whose products read split keys, and those keys
/// ([`split_products`]).
pub type Split = (Module, Vec<SplitKey>);

/// `module` with the product paths of two kinds of parameter read under
/// keys of their own, which iree-compile can import and pack:
/// - a whole-entry parameter that feeds both products and other ops (a
///   tied embedding: gathered, and the LM head), directly or through
///   conversions and reshapes (a block table's f16 scales, widened once
///   for both), read as `KEY#products` on its product paths, while the
///   gather keeps reading `KEY`;
/// - a row-chunk slice (`#flow.parameter.named<…, {offset = …}>`: a table
///   too large for one Vulkan buffer, exported in row chunks) that feeds a
///   product, read as `KEY@OFFSET#products`, a whole entry of the slice's
///   bytes: iree-compile 3.13 crashes importing a slice (spec/iree.md).
///
/// And every other read of a row-chunk slice (a gather of a chunked
/// table) reads the whole entry the export's archive has over that chunk
/// (`KEY@OFFSET`, [`crate::params::irpa::chunk_key`]) when `archive_has`
/// says it is there: a module that reads no slice past an entry's start
/// can have the archive mapped by iree-base-runtime 3.13 (spec/iree.md).
///
/// Returns the module and the new keys (empty when only slices were
/// renamed); `None` when nothing changed.
pub fn split_products(
    module: &Module,
    archive_has: impl Fn(&str) -> bool,
) -> Result<Option<Split>, GraphError> {
    rewrite(module, archive_has, true)
}

/// `module` with every read of a row-chunk slice reading instead the whole
/// entry the export's archive has over that chunk (`KEY@OFFSET`,
/// [`crate::params::irpa::chunk_key`]), where `archive_has` says it is
/// there: the part of [`split_products`] a module compiled without
/// `--pack` takes, so that a runtime can map the archive
/// (iree-base-runtime 3.13 reads a slice past an entry's start right only
/// from a file handle, spec/iree.md). Such a module needs the `.irpa`: the
/// `.safetensors` has no chunk entries. `None` when no slice has an entry.
pub fn read_chunk_entries(
    module: &Module,
    archive_has: impl Fn(&str) -> bool,
) -> Result<Option<Module>, GraphError> {
    Ok(rewrite(module, archive_has, false)?.map(|(m, _)| m))
}

/// [`split_products`] (`split`), or only its renaming of slices to chunk
/// entries ([`read_chunk_entries`]).
fn rewrite(
    module: &Module,
    archive_has: impl Fn(&str) -> bool,
    split_products: bool,
) -> Result<Option<Split>, GraphError> {
    let mut split: Vec<SplitKey> = Vec::new();
    let mut renamed = false;
    let mut out = module.clone();
    out.functions.clear();
    for f in &module.functions {
        let nodes = f.nodes();
        let users = users_of(f);
        // Parameters (whole or sliced), or conversions, reshapes or
        // transposes of one, whose product paths get a copy: a whole entry
        // with both kinds of use, or a slice with any product use.
        let mixed: Vec<bool> = (0..nodes.len())
            .map(|i| match root_param(i, nodes) {
                // An i4 parameter is not imported (`packable_keys`), so its
                // products keep reading it.
                Some((_, offset)) if split_products && !root_is_i4(i, nodes) => {
                    (offset.is_some() || !to_dots(i, nodes, &users))
                        && users[i].iter().any(|&u| on_product_path(u, nodes, &users))
                }
                _ => false,
            })
            .collect();
        // The whole entry the archive has over each slice, which its reads
        // other than by products take instead.
        let chunks: Vec<Option<String>> = nodes
            .iter()
            .map(|n| match &n.op {
                Op::Parameter {
                    key,
                    offset: Some(o),
                } => Some(chunk_key(key, *o)).filter(|k| archive_has(k)),
                _ => None,
            })
            .collect();
        if !mixed.iter().any(|&m| m) && chunks.iter().all(Option::is_none) {
            out.functions.push(f.clone());
            continue;
        }
        // Whether user `u` reads the products' copy of its mixed arguments.
        let reads_copy = |u: usize| {
            nodes[u].args.iter().any(|a| mixed[a.index()]) && on_product_path(u, nodes, &users)
        };
        // The nodes the new function keeps: the outputs, their stores and
        // arguments, and whatever a kept node reads other than through a
        // copy (a slice read only by products is left out, not printed as
        // an unused global).
        let mut keep = vec![false; nodes.len()];
        for o in f.outputs() {
            keep[o.index()] = true;
        }
        for (i, n) in nodes.iter().enumerate().rev() {
            if matches!(n.op, Op::Input { .. }) {
                keep[i] = true;
            }
            if !keep[i] {
                continue;
            }
            let copy = reads_copy(i);
            for a in &n.args {
                if !(copy && mixed[a.index()]) {
                    keep[a.index()] = true;
                }
            }
        }
        let mut g = Graph::new(f.name.clone());
        let mut map: Vec<Option<Value>> = vec![None; nodes.len()];
        // The products' copy of each chain node, once made.
        let mut second: HashMap<usize, Value> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if !keep[i] {
                continue;
            }
            let v = match &n.op {
                Op::Input { .. } => g.input(n.ty.clone()),
                Op::Parameter { .. } if chunks[i].is_some() => {
                    renamed = true;
                    g.parameter(chunks[i].as_deref().unwrap_or_default(), n.ty.clone())?
                }
                op => {
                    let copy = reads_copy(i);
                    let mut args = Vec::with_capacity(n.args.len());
                    for a in &n.args {
                        let ai = a.index();
                        if mixed[ai] && copy {
                            args.push(products_copy(ai, nodes, &mut g, &mut second, &mut split)?);
                        } else {
                            args.push(map[ai].expect("a kept node's arguments are kept"));
                        }
                    }
                    g.push(op.clone(), &args, n.ty.clone())
                }
            };
            map[i] = Some(v);
        }
        // Left-out nodes are never outputs, so any value stands in for them.
        let map: Vec<Value> = map.into_iter().map(|v| v.unwrap_or(Value(0))).collect();
        g.set_outputs_as(f, &map)?;
        out.functions.push(g);
    }
    Ok((!split.is_empty() || renamed).then_some((out, split)))
}

/// The products' copy of chain node `i` ([`split_products`]): its parameter
/// read under `KEY#products` (`KEY@OFFSET#products` for a slice), then the
/// same conversions and reshapes.
fn products_copy(
    i: usize,
    nodes: &[Node],
    g: &mut Graph,
    second: &mut HashMap<usize, Value>,
    split: &mut Vec<SplitKey>,
) -> Result<Value, GraphError> {
    if let Some(&v) = second.get(&i) {
        return Ok(v);
    }
    let n = &nodes[i];
    let v = match &n.op {
        Op::Parameter { key, offset } => {
            let (new_key, range) = match offset {
                None => (format!("{key}{PRODUCTS_SUFFIX}"), None),
                Some(o) => (
                    format!("{}{PRODUCTS_SUFFIX}", chunk_key(key, *o)),
                    Some((*o, n.ty.byte_size() as u64)),
                ),
            };
            if !split.iter().any(|s| s.key == new_key) {
                split.push(SplitKey {
                    key: new_key.clone(),
                    source: key.clone(),
                    range,
                });
            }
            g.parameter(&new_key, n.ty.clone())?
        }
        op => {
            let a = products_copy(n.args[0].index(), nodes, g, second, split)?;
            g.push(op.clone(), &[a], n.ty.clone())
        }
    };
    second.insert(i, v);
    Ok(v)
}

/// Writes `out`, an archive of the keys of [`split_products`]: each new key
/// with the bytes (or the slice of them) of its source in the export's
/// archive `reader`, for iree-compile to import beside it.
pub(crate) fn write_split_archive(
    reader: &IrpaReader,
    keys: &[SplitKey],
    out: &Path,
) -> Result<(), ParamsError> {
    let archive = reader.path();
    let mut specs = Vec::new();
    let mut data = Vec::new();
    for k in keys {
        let not_found = || ParamsError::NotFound {
            file: archive.to_path_buf(),
            tensor: k.source.clone(),
        };
        let bytes = reader
            .get(&k.source)
            .ok_or_else(not_found)?
            .expand()
            .map_err(|_| {
                ParamsError::io(
                    archive,
                    std::io::Error::new(std::io::ErrorKind::OutOfMemory, k.source.clone()),
                )
            })?;
        let bytes = match k.range {
            None => bytes,
            Some((offset, length)) => {
                let range = offset as usize..(offset + length) as usize;
                match bytes {
                    Cow::Borrowed(b) => Cow::Borrowed(b.get(range).ok_or_else(not_found)?),
                    Cow::Owned(v) => Cow::Owned(v.get(range).ok_or_else(not_found)?.to_vec()),
                }
            }
        };
        specs.push(EntrySpec::data(k.key.clone(), bytes.len() as u64));
        data.push((&k.key, bytes));
    }
    let mut w = IrpaWriter::new(out, specs)?;
    for (k, b) in data {
        w.write_tensor(k, &b)?;
    }
    w.finish()?;
    Ok(())
}

/// What [`share_duplicates`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// Entries in the archive.
    pub entries: usize,
    /// Entries that read another entry's bytes.
    pub shared: usize,
    /// Bytes stored.
    pub stored: u64,
    /// Bytes the entries cover (stored once per entry).
    pub covered: u64,
}

/// Rewrites the archive `src` (iree-compile's export) into `dst`, in kiln's
/// layout (the entries in `src`'s order), storing each distinct byte string
/// once: an entry whose bytes equal an earlier entry's reads that entry's
/// storage ([`EntrySpec::shared`]). `dst` is written to a temporary file
/// and renamed into place.
pub fn share_duplicates(src: &Path, dst: &Path) -> Result<Shared, ParamsError> {
    use crate::params::irpa::{EntryKind, IrpaData};
    use sha2::{Digest, Sha256};
    let reader = IrpaReader::open(src)?;
    let entries = reader.entries();
    let bytes_of = |i: usize| match reader.data(&entries[i]) {
        IrpaData::Data(d) => d,
        IrpaData::Splat { .. } => &[],
    };
    let mut specs = Vec::new();
    let mut first: HashMap<[u8; 32], Vec<usize>> = HashMap::new();
    let mut stored = Vec::new();
    let mut shared = Shared {
        entries: 0,
        shared: 0,
        stored: 0,
        covered: 0,
    };
    for (i, e) in entries.iter().enumerate() {
        match &e.kind {
            EntryKind::Skip => continue,
            EntryKind::Splat { length, pattern } => {
                specs.push(EntrySpec::splat(e.name.clone(), pattern, *length));
            }
            EntryKind::Data { length, .. } => {
                let bytes = bytes_of(i);
                let same = first.entry(Sha256::digest(bytes).into()).or_default();
                // Same hash: compare the bytes too.
                match same.iter().find(|&&j| bytes_of(j) == bytes) {
                    Some(&j) => {
                        specs.push(EntrySpec::shared(
                            e.name.clone(),
                            entries[j].name.clone(),
                            *length,
                        ));
                        shared.shared += 1;
                    }
                    None => {
                        same.push(i);
                        specs.push(EntrySpec::data(e.name.clone(), *length));
                        stored.push(i);
                        shared.stored += length;
                    }
                }
            }
        }
        shared.entries += 1;
        shared.covered += e.len();
    }
    let mut w = IrpaWriter::new(dst, specs)?;
    for i in stored {
        w.write_tensor(&entries[i].name, bytes_of(i))?;
    }
    w.finish()?;
    Ok(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_archive_sits_beside_the_module() {
        assert_eq!(
            packed_archive(Path::new("out/m-kv-host.vmfb")),
            Path::new("out/m-kv-host.packed.irpa")
        );
    }
}
